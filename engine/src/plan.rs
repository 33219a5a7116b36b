//! The load plan: parsed from a neutral value tree (built from the Python dict
//! at the boundary) and validated here, so every rule is testable without a
//! Python interpreter. Each error names the offending key and what is allowed.

use std::fmt;
use std::time::Duration;

use crate::keys;

/// A plain value as it came from Python.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    Dict(Vec<(String, Value)>),
    /// Anything else, by type name (reported, never used).
    Other(String),
}

impl Value {
    fn describe(&self) -> String {
        match self {
            Value::None => "None".into(),
            Value::Bool(b) => if *b { "True" } else { "False" }.into(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Str(s) => format!("{s:?}"),
            Value::List(_) => "a list".into(),
            Value::Dict(_) => "a dict".into(),
            Value::Other(kind) => kind.clone(),
        }
    }
}

/// An invalid plan; the message is what Python's ValueError carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanError {}

type Result<T> = std::result::Result<T, PlanError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balancer {
    PickFirst,
    RoundRobin,
    Leader,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Etcd { balancer: Balancer },
    ZooKeeper { session_timeout: Duration },
    Consul,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Write,
    Read,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consistency {
    Linearizable,
    Serializable,
}

/// One "host:port" endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The host without IPv6 brackets (what a socket connects to).
    pub host: String,
    pub port: u16,
    /// "host:port" exactly as given (IPv6 keeps its brackets): URIs and Host headers.
    pub authority: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub clients: usize,
    pub connections: usize,
    pub requests: u64,
    /// Requests per second; 0 = closed loop.
    pub rate: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub protocol: Protocol,
    pub endpoints: Vec<Endpoint>,
    pub operation: Operation,
    pub key_size: usize,
    pub value_size: usize,
    pub key_space: u64,
    /// Added to every distinct key's number: a warm-up writes keys after the
    /// measured load's, so neither overwrites the other.
    pub first_key: u64,
    pub sequential_keys: bool,
    pub same_key: bool,
    pub seed: u64,
    pub consistency: Consistency,
    pub timeout: Duration,
    pub steps: Vec<Step>,
    pub threads: usize,
    pub max_errors: Option<u64>,
}

impl Plan {
    /// Whether requests use distinct keys (only writes without same_key do;
    /// every read and every same_key write uses key 0).
    pub fn distinct_keys(&self) -> bool {
        self.operation == Operation::Write && !self.same_key
    }

    /// Every step's requests, added up: the number of record slots.
    pub fn total_requests(&self) -> u64 {
        self.steps.iter().map(|s| s.requests).sum()
    }

    /// The index of step `i`'s first request among the whole run's requests.
    pub fn step_base(&self, i: usize) -> u64 {
        self.steps[..i].iter().map(|s| s.requests).sum()
    }

    /// The value every write stores and every read must return.
    pub fn value(&self) -> Vec<u8> {
        vec![b'v'; self.value_size]
    }
}

// Bounds that keep a typo from turning into a giant allocation or a panic.
const MAX_KEY_SIZE: i64 = 1 << 20;
const MAX_VALUE_SIZE: i64 = 1 << 30;
const MAX_THREADS: i64 = 1024;
/// Clients and connections per step; test cases allow 100,000.
const MAX_CLIENTS: i64 = 1 << 20;
const MAX_TIMEOUT_S: f64 = 1e6;
/// Far beyond any server; keeps 1 / rate a positive number of nanoseconds.
const MAX_RATE: f64 = 1e9;
/// A step's index is stored as uint16.
const MAX_STEPS: usize = 1 << 16;
/// The random order is stored as u32 key numbers (4 bytes per key, not 8),
/// built before the first request: at most 1 GB of it.
const MAX_PERMUTED_KEY_SPACE: u64 = 1 << 28;

const TOP_KEYS: &[&str] = &[
    "protocol",
    "endpoints",
    "options",
    "operation",
    "key_size",
    "value_size",
    "key_space",
    "first_key",
    "sequential_keys",
    "same_key",
    "seed",
    "consistency",
    "timeout_s",
    "steps",
    "threads",
    "max_errors",
];
const STEP_KEYS: &[&str] = &["clients", "connections", "requests", "rate"];

/// Reads a dict's keys by name, then rejects any key nobody asked for.
struct Fields<'a> {
    path: String,
    entries: &'a [(String, Value)],
    allowed: &'a [&'a str],
    /// Whose keys these are, when it matters (options depend on the protocol).
    owner: Option<&'a str>,
}

impl<'a> Fields<'a> {
    fn new(path: String, value: &'a Value, allowed: &'a [&'a str]) -> Result<Self> {
        Fields::owned(path, value, allowed, None)
    }

    fn owned(
        path: String,
        value: &'a Value,
        allowed: &'a [&'a str],
        owner: Option<&'a str>,
    ) -> Result<Self> {
        match value {
            Value::Dict(entries) => {
                let fields = Fields {
                    path,
                    entries,
                    allowed,
                    owner,
                };
                fields.reject_unknown()?;
                Ok(fields)
            }
            other => Err(PlanError(format!(
                "{} must be a dict, got {}",
                path,
                other.describe()
            ))),
        }
    }

    fn reject_unknown(&self) -> Result<()> {
        for (key, _) in self.entries {
            if !self.allowed.contains(&key.as_str()) {
                let allowed = match (self.owner, self.allowed.is_empty()) {
                    (Some(owner), true) => format!("{owner} takes none"),
                    (Some(owner), false) => {
                        format!("allowed keys for {owner}: {}", quoted(self.allowed))
                    }
                    (None, _) => format!("allowed keys: {}", quoted(self.allowed)),
                };
                return Err(PlanError(format!(
                    "{} has an unknown key {:?}; {allowed}",
                    self.path, key
                )));
            }
        }
        Ok(())
    }

    fn name(&self, key: &str) -> String {
        format!("{}[{:?}]", self.path, key)
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn required(&self, key: &str, allowed: &str) -> Result<&'a Value> {
        self.get(key)
            .ok_or_else(|| PlanError(format!("{} is missing {:?} ({})", self.path, key, allowed)))
    }

    fn int(&self, key: &str, min: i64, max: i64) -> Result<i64> {
        let allowed = range_text(min, max);
        match self.required(key, &allowed)? {
            Value::Int(i) if (min..=max).contains(i) => Ok(*i),
            other => Err(PlanError(format!(
                "{} must be {}, got {}",
                self.name(key),
                allowed,
                other.describe()
            ))),
        }
    }

    fn float(&self, key: &str, min: f64, exclusive: bool, max: f64) -> Result<f64> {
        let allowed = format!(
            "a number {} {min} (at most {max})",
            if exclusive { ">" } else { ">=" },
        );
        let value = match self.required(key, &allowed)? {
            Value::Float(f) => Some(*f),
            // Python callers write `rate: 100` as readily as `100.0`.
            Value::Int(i) => Some(*i as f64),
            _ => None,
        };
        match value {
            Some(f) if f.is_finite() && (f > min || (!exclusive && f == min)) && f <= max => Ok(f),
            _ => Err(PlanError(format!(
                "{} must be {}, got {}",
                self.name(key),
                allowed,
                self.get(key).map(Value::describe).unwrap_or_default()
            ))),
        }
    }

    fn boolean(&self, key: &str) -> Result<bool> {
        match self.required(key, "True or False")? {
            Value::Bool(b) => Ok(*b),
            other => Err(PlanError(format!(
                "{} must be True or False, got {}",
                self.name(key),
                other.describe()
            ))),
        }
    }

    fn choice<T: Copy>(&self, key: &str, choices: &[(&str, T)], default: Option<T>) -> Result<T> {
        let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
        let allowed = format!("one of {}", quoted(&names));
        let value = match (self.get(key), default) {
            (None, Some(d)) => return Ok(d),
            (None, None) => self.required(key, &allowed)?,
            (Some(v), _) => v,
        };
        if let Value::Str(s) = value
            && let Some((_, t)) = choices.iter().find(|(n, _)| n == s)
        {
            return Ok(*t);
        }
        Err(PlanError(format!(
            "{} must be {}, got {}",
            self.name(key),
            allowed,
            value.describe()
        )))
    }
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn range_text(min: i64, max: i64) -> String {
    if max == i64::MAX {
        format!("an int >= {min}")
    } else {
        format!("an int from {min} to {max}")
    }
}

/// Validates a whole plan.
pub fn parse(value: &Value) -> Result<Plan> {
    let top = Fields::new("plan".into(), value, TOP_KEYS)?;
    let protocol_name = top.choice(
        "protocol",
        &[
            ("etcd", "etcd"),
            ("zookeeper", "zookeeper"),
            ("consul", "consul"),
        ],
        None,
    )?;
    let endpoints = parse_endpoints(&top)?;
    let protocol = parse_options(&top, protocol_name)?;
    let operation = top.choice(
        "operation",
        &[("write", Operation::Write), ("read", Operation::Read)],
        None,
    )?;
    let key_size = top.int("key_size", 1, MAX_KEY_SIZE)? as usize;
    let value_size = top.int("value_size", 0, MAX_VALUE_SIZE)? as usize;
    let key_space = top.int("key_space", 1, i64::MAX)? as u64;
    let first_key = match top.get("first_key") {
        None => 0,
        Some(_) => top.int("first_key", 0, i64::MAX)? as u64,
    };
    let sequential_keys = top.boolean("sequential_keys")?;
    let same_key = top.boolean("same_key")?;
    // Any int is a seed; negative ones keep their bits.
    let seed = top.int("seed", i64::MIN, i64::MAX)? as u64;
    let consistency = top.choice(
        "consistency",
        &[
            ("linearizable", Consistency::Linearizable),
            ("serializable", Consistency::Serializable),
        ],
        None,
    )?;
    let timeout = Duration::from_secs_f64(top.float("timeout_s", 0.0, true, MAX_TIMEOUT_S)?);
    let steps = parse_steps(&top)?;
    let threads = top.int("threads", 1, MAX_THREADS)? as usize;
    let max_errors = match top.get("max_errors") {
        None | Some(Value::None) => None,
        Some(Value::Int(i)) if *i >= 0 => Some(*i as u64),
        Some(other) => {
            return Err(PlanError(format!(
                "plan[\"max_errors\"] must be None or an int >= 0, got {}",
                other.describe()
            )));
        }
    };
    let plan = Plan {
        protocol,
        endpoints,
        operation,
        key_size,
        value_size,
        key_space,
        first_key,
        sequential_keys,
        same_key,
        seed,
        consistency,
        timeout,
        steps,
        threads,
        max_errors,
    };
    check_key_space(&plan)?;
    Ok(plan)
}

fn parse_endpoints(top: &Fields<'_>) -> Result<Vec<Endpoint>> {
    let allowed = "a non-empty list of \"host:port\" strings";
    let name = top.name("endpoints");
    let items = match top.required("endpoints", allowed)? {
        Value::List(items) if !items.is_empty() => items,
        other => {
            return Err(PlanError(format!(
                "{name} must be {allowed}, got {}",
                other.describe()
            )));
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Str(s) => parse_endpoint(s).ok_or_else(|| {
                PlanError(format!(
                    "{name}[{i}] must be \"host:port\" (IPv4, [IPv6] or a name; port 1-65535), got {s:?}"
                ))
            }),
            other => Err(PlanError(format!(
                "{name}[{i}] must be a \"host:port\" string, got {}",
                other.describe()
            ))),
        })
        .collect()
}

/// "host:port", "[v6]:port" or "name:port"; None when malformed.
pub fn parse_endpoint(text: &str) -> Option<Endpoint> {
    let (host, port) = text.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let host = if let Some(inner) = host.strip_prefix('[') {
        let inner = inner.strip_suffix(']')?;
        inner.parse::<std::net::Ipv6Addr>().ok()?;
        inner
    } else {
        // A bare colon in the host means an unbracketed IPv6 address, which is ambiguous.
        if host.is_empty() || host.contains([':', '/', ' ', '[', ']']) {
            return None;
        }
        host
    };
    Some(Endpoint {
        host: host.to_owned(),
        port,
        authority: text.to_owned(),
    })
}

fn parse_options(top: &Fields<'_>, protocol: &str) -> Result<Protocol> {
    let empty = Value::Dict(Vec::new());
    let value = top.get("options").unwrap_or(&empty);
    let path = top.name("options");
    match protocol {
        "etcd" => {
            let options = Fields::owned(path, value, &["balancer"], Some(protocol))?;
            let balancer = options.choice(
                "balancer",
                &[
                    ("pick_first", Balancer::PickFirst),
                    ("round_robin", Balancer::RoundRobin),
                    ("leader", Balancer::Leader),
                ],
                Some(Balancer::RoundRobin),
            )?;
            Ok(Protocol::Etcd { balancer })
        }
        "zookeeper" => {
            let options = Fields::owned(path, value, &["session_timeout_ms"], Some(protocol))?;
            let ms = if options.get("session_timeout_ms").is_some() {
                options.int("session_timeout_ms", 1, i64::from(u32::MAX))? as u64
            } else {
                30_000
            };
            Ok(Protocol::ZooKeeper {
                session_timeout: Duration::from_millis(ms),
            })
        }
        _ => {
            Fields::owned(path, value, &[], Some(protocol))?;
            Ok(Protocol::Consul)
        }
    }
}

fn parse_steps(top: &Fields<'_>) -> Result<Vec<Step>> {
    let allowed =
        "a non-empty list of {\"clients\", \"connections\", \"requests\", \"rate\"} dicts";
    let name = top.name("steps");
    let items = match top.required("steps", allowed)? {
        Value::List(items) if !items.is_empty() && items.len() <= MAX_STEPS => items,
        other => {
            return Err(PlanError(format!(
                "{name} must be {allowed} (at most {MAX_STEPS}), got {}",
                match other {
                    Value::List(items) => format!("{} steps", items.len()),
                    other => other.describe(),
                }
            )));
        }
    };
    let mut steps = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let step = Fields::new(format!("{name}[{i}]"), item, STEP_KEYS)?;
        let clients = step.int("clients", 1, MAX_CLIENTS)? as usize;
        let connections = step.int("connections", 1, MAX_CLIENTS)? as usize;
        if connections > clients {
            return Err(PlanError(format!(
                "{} must be from 1 to clients ({clients}), got {connections}",
                step.name("connections")
            )));
        }
        let requests = step.int("requests", 0, i64::MAX)? as u64;
        let rate = step.float("rate", 0.0, false, MAX_RATE)?;
        steps.push(Step {
            clients,
            connections,
            requests,
            rate,
        });
    }
    Ok(steps)
}

/// Distinct keys must exist for every request: request r uses key r (or
/// perm[r], a key below key_space), and each must fit in key_size bytes.
fn check_key_space(plan: &Plan) -> Result<()> {
    if !plan.distinct_keys() {
        return Ok(());
    }
    let total = plan.total_requests();
    if total > plan.key_space {
        return Err(PlanError(format!(
            "plan[\"key_space\"] ({}) must be at least the steps' requests added up ({total}): \
             request r uses key r of the key space",
            plan.key_space
        )));
    }
    if let Some(capacity) = keys::capacity(plan.key_size)
        && plan.key_space > capacity
    {
        return Err(PlanError(format!(
            "plan[\"key_space\"] ({}) does not fit in plan[\"key_size\"] ({}): \
             {capacity} distinct keys (\"k\" and {} digits); raise key_size or set same_key",
            plan.key_space,
            plan.key_size,
            plan.key_size - 1
        )));
    }
    let last = plan.first_key.checked_add(plan.key_space);
    if let Some(capacity) = keys::capacity(plan.key_size)
        && last.is_none_or(|last| last > capacity)
    {
        return Err(PlanError(format!(
            "plan[\"first_key\"] ({}) + plan[\"key_space\"] ({}) does not fit in \
             plan[\"key_size\"] ({}): {capacity} distinct keys",
            plan.first_key, plan.key_space, plan.key_size
        )));
    }
    if !plan.sequential_keys && plan.key_space > MAX_PERMUTED_KEY_SPACE {
        return Err(PlanError(format!(
            "plan[\"key_space\"] ({}) must be at most {MAX_PERMUTED_KEY_SPACE} when \
             plan[\"sequential_keys\"] is False (the random order is kept in memory)",
            plan.key_space
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn s(text: &str) -> Value {
        Value::Str(text.into())
    }

    fn dict(entries: &[(&str, Value)]) -> Value {
        Value::Dict(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        )
    }

    pub(crate) fn step(clients: i64, connections: i64, requests: i64, rate: f64) -> Value {
        dict(&[
            ("clients", Value::Int(clients)),
            ("connections", Value::Int(connections)),
            ("requests", Value::Int(requests)),
            ("rate", Value::Float(rate)),
        ])
    }

    /// The plan `good()` describes, parsed: a starting point other modules'
    /// tests change a field or two of.
    pub(crate) fn good_plan() -> Plan {
        parse(&dict(&good())).unwrap()
    }

    pub(crate) fn good() -> Vec<(&'static str, Value)> {
        vec![
            ("protocol", s("etcd")),
            ("endpoints", Value::List(vec![s("127.0.0.1:2379")])),
            ("options", dict(&[("balancer", s("pick_first"))])),
            ("operation", s("write")),
            ("key_size", Value::Int(8)),
            ("value_size", Value::Int(16)),
            ("key_space", Value::Int(1000)),
            ("sequential_keys", Value::Bool(false)),
            ("same_key", Value::Bool(false)),
            ("seed", Value::Int(7)),
            ("consistency", s("linearizable")),
            ("timeout_s", Value::Float(2.5)),
            (
                "steps",
                Value::List(vec![step(10, 2, 600, 0.0), step(20, 4, 400, 100.0)]),
            ),
            ("threads", Value::Int(1)),
            ("max_errors", Value::None),
        ]
    }

    fn with(key: &str, value: Value) -> Value {
        let mut entries = good();
        entries.iter_mut().find(|(k, _)| *k == key).unwrap().1 = value;
        dict(&entries)
    }

    fn without(key: &str) -> Value {
        let mut entries = good();
        entries.retain(|(k, _)| *k != key);
        dict(&entries)
    }

    fn error(value: Value) -> String {
        parse(&value).unwrap_err().0
    }

    #[test]
    fn good_plan_parses() {
        let plan = parse(&dict(&good())).unwrap();
        assert_eq!(
            plan.protocol,
            Protocol::Etcd {
                balancer: Balancer::PickFirst
            }
        );
        assert_eq!(plan.endpoints[0].host, "127.0.0.1");
        assert_eq!(plan.endpoints[0].port, 2379);
        assert_eq!(plan.timeout, Duration::from_millis(2500));
        assert_eq!(plan.total_requests(), 1000);
        assert_eq!(plan.step_base(1), 600);
        assert_eq!(plan.steps[1].rate, 100.0);
        assert_eq!(plan.max_errors, None);
        assert_eq!(plan.value(), vec![b'v'; 16]);
    }

    #[test]
    fn defaults_for_optional_keys() {
        let mut entries = good();
        entries.retain(|(k, _)| *k != "options" && *k != "max_errors");
        let plan = parse(&dict(&entries)).unwrap();
        assert_eq!(
            plan.protocol,
            Protocol::Etcd {
                balancer: Balancer::RoundRobin
            }
        );
        assert_eq!(plan.max_errors, None);
        let mut entries = good();
        entries[0].1 = s("zookeeper");
        entries[2].1 = dict(&[]);
        assert_eq!(
            parse(&dict(&entries)).unwrap().protocol,
            Protocol::ZooKeeper {
                session_timeout: Duration::from_secs(30)
            }
        );
    }

    #[test]
    fn each_bad_key_names_itself_and_what_is_allowed() {
        let cases: Vec<(Value, &str)> = vec![
            (
                with("protocol", s("redis")),
                r#"plan["protocol"] must be one of "etcd", "zookeeper", "consul", got "redis""#,
            ),
            (
                without("protocol"),
                r#"plan is missing "protocol" (one of "etcd""#,
            ),
            (
                with("endpoints", Value::List(vec![])),
                r#"plan["endpoints"] must be a non-empty list of "host:port" strings"#,
            ),
            (
                with("endpoints", Value::List(vec![s("localhost")])),
                r#"plan["endpoints"][0] must be "host:port""#,
            ),
            (
                with("options", dict(&[("balancer", s("random"))])),
                r#"plan["options"]["balancer"] must be one of "pick_first", "round_robin", "leader", got "random""#,
            ),
            (
                with("options", dict(&[("session_timeout_ms", Value::Int(5))])),
                r#"plan["options"] has an unknown key "session_timeout_ms"; allowed keys for etcd: "balancer""#,
            ),
            (
                with("operation", s("delete")),
                r#"plan["operation"] must be one of "write", "read", got "delete""#,
            ),
            (
                with("key_size", Value::Int(0)),
                r#"plan["key_size"] must be an int from 1 to 1048576, got 0"#,
            ),
            (
                with("key_size", Value::Bool(true)),
                r#"plan["key_size"] must be an int from 1 to 1048576, got True"#,
            ),
            (
                with("value_size", Value::Int(-1)),
                r#"plan["value_size"] must be an int from 0 to"#,
            ),
            (
                with("key_space", Value::Int(0)),
                r#"plan["key_space"] must be an int >= 1, got 0"#,
            ),
            (
                with("sequential_keys", Value::Int(1)),
                r#"plan["sequential_keys"] must be True or False, got 1"#,
            ),
            (
                with("same_key", Value::None),
                r#"plan["same_key"] must be True or False, got None"#,
            ),
            (
                with("seed", Value::Float(1.5)),
                r#"plan["seed"] must be an int"#,
            ),
            (
                with("consistency", s("eventual")),
                r#"plan["consistency"] must be one of "linearizable", "serializable", got "eventual""#,
            ),
            (
                with("timeout_s", Value::Float(0.0)),
                r#"plan["timeout_s"] must be a number > 0"#,
            ),
            (
                with("timeout_s", Value::Float(f64::NAN)),
                r#"plan["timeout_s"] must be a number > 0"#,
            ),
            (
                with("steps", Value::List(vec![])),
                r#"plan["steps"] must be a non-empty list"#,
            ),
            (
                with("steps", Value::List(vec![step(0, 1, 5, 0.0)])),
                r#"plan["steps"][0]["clients"] must be an int from 1 to"#,
            ),
            (
                with("steps", Value::List(vec![step(1 << 32, 1, 5, 0.0)])),
                r#"plan["steps"][0]["clients"] must be an int from 1 to 1048576, got 4294967296"#,
            ),
            (
                with("steps", Value::List(vec![step(2, 3, 5, 0.0)])),
                r#"plan["steps"][0]["connections"] must be from 1 to clients (2), got 3"#,
            ),
            (
                with("steps", Value::List(vec![step(2, 1, -5, 0.0)])),
                r#"plan["steps"][0]["requests"] must be an int >= 0, got -5"#,
            ),
            (
                with("steps", Value::List(vec![step(2, 1, 5, -1.0)])),
                r#"plan["steps"][0]["rate"] must be a number >= 0"#,
            ),
            (
                with(
                    "steps",
                    Value::List(vec![dict(&[
                        ("clients", Value::Int(1)),
                        ("connections", Value::Int(1)),
                        ("requests", Value::Int(1)),
                        ("rate", Value::Int(0)),
                        ("burst", Value::Int(3)),
                    ])]),
                ),
                r#"plan["steps"][0] has an unknown key "burst"; allowed keys: "clients", "connections", "requests", "rate""#,
            ),
            (
                with("threads", Value::Int(0)),
                r#"plan["threads"] must be an int from 1 to 1024, got 0"#,
            ),
            (
                with("max_errors", Value::Int(-1)),
                r#"plan["max_errors"] must be None or an int >= 0, got -1"#,
            ),
            (
                with("key_space", Value::Int(999)),
                r#"plan["key_space"] (999) must be at least the steps' requests added up (1000)"#,
            ),
            (
                with("key_size", Value::Int(3)),
                r#"plan["key_space"] (1000) does not fit in plan["key_size"] (3): 100 distinct keys"#,
            ),
            (
                dict(&[("protocol", s("etcd")), ("color", s("red"))]),
                r#"plan has an unknown key "color"; allowed keys: "protocol", "endpoints""#,
            ),
            (Value::List(vec![]), "plan must be a dict, got a list"),
        ];
        for (value, expected) in cases {
            let message = error(value);
            assert!(
                message.starts_with(expected),
                "expected {expected:?}\n     got {message:?}"
            );
        }
    }

    #[test]
    fn zookeeper_and_consul_options() {
        let mut entries = good();
        entries[0].1 = s("zookeeper");
        entries[2].1 = dict(&[("session_timeout_ms", Value::Int(0))]);
        assert!(
            error(dict(&entries))
                .starts_with(r#"plan["options"]["session_timeout_ms"] must be an int from 1 to"#)
        );
        entries[2].1 = dict(&[("session_timeout_ms", Value::Int(4000))]);
        assert_eq!(
            parse(&dict(&entries)).unwrap().protocol,
            Protocol::ZooKeeper {
                session_timeout: Duration::from_secs(4)
            }
        );
        entries[0].1 = s("consul");
        assert!(error(dict(&entries)).starts_with(
            r#"plan["options"] has an unknown key "session_timeout_ms"; consul takes none"#
        ));
        entries[2].1 = dict(&[]);
        assert_eq!(parse(&dict(&entries)).unwrap().protocol, Protocol::Consul);
    }

    #[test]
    fn first_key_is_optional_and_must_fit() {
        assert_eq!(good_plan().first_key, 0);
        let mut entries = good();
        entries.push(("first_key", Value::Int(9_999_000)));
        assert_eq!(parse(&dict(&entries)).unwrap().first_key, 9_999_000);
        // key_size 8 holds 10,000,000 keys: 9,999,001 + 1000 do not fit.
        entries.last_mut().unwrap().1 = Value::Int(9_999_001);
        let error = parse(&dict(&entries)).unwrap_err().0;
        assert!(error.contains("plan[\"first_key\"] (9999001)"), "{error}");
        entries.last_mut().unwrap().1 = Value::Int(-1);
        assert!(parse(&dict(&entries)).is_err());
    }

    #[test]
    fn key_space_only_matters_for_distinct_keys() {
        // Reads (and same_key writes) use key 0 only: a tiny key_size is fine.
        let mut entries = good();
        entries
            .iter_mut()
            .find(|(k, _)| *k == "key_size")
            .unwrap()
            .1 = Value::Int(1);
        entries
            .iter_mut()
            .find(|(k, _)| *k == "operation")
            .unwrap()
            .1 = s("read");
        assert!(parse(&dict(&entries)).is_ok());
        entries
            .iter_mut()
            .find(|(k, _)| *k == "operation")
            .unwrap()
            .1 = s("write");
        assert!(parse(&dict(&entries)).is_err());
        entries
            .iter_mut()
            .find(|(k, _)| *k == "same_key")
            .unwrap()
            .1 = Value::Bool(true);
        assert!(parse(&dict(&entries)).is_ok());
    }

    #[test]
    fn endpoints() {
        let v6 = parse_endpoint("[::1]:2379").unwrap();
        assert_eq!(v6.host, "::1");
        assert_eq!(v6.authority, "[::1]:2379");
        let name = parse_endpoint("db-1.example:8500").unwrap();
        assert_eq!((name.host.as_str(), name.port), ("db-1.example", 8500));
        for bad in [
            "::1:2379",
            "host",
            "host:0",
            "host:70000",
            ":80",
            "[::1:80",
            "[x]:80",
        ] {
            assert!(parse_endpoint(bad).is_none(), "{bad}");
        }
    }
}
