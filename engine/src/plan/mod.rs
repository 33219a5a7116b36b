//! The load plan: one typed contract with Python (its shape is the `Plan`
//! TypedDict in `dbtester/_engine.pyi`, built by `dbtester/load/native.py`).
//! Defaults and the test case's bounds live in the pydantic model; this side
//! checks the plan's shape and types. It is data at the bottom of the crate
//! and imports nothing else of it: a name that selects code (the protocol
//! and its options, the key distribution, the operations of the mix) is
//! kept as given and resolved by the code it names (`protocols`,
//! `workload`), which also checks what the engine needs to run it. Each
//! error names the offending key and what is allowed.

mod tls;
mod value;

use std::time::Duration;

#[cfg(test)]
pub(crate) use tls::pki;
pub use tls::{Tls, TlsPlan};
pub use value::{Fields, PlanError, Secret, Value, quoted};

type Result<T> = std::result::Result<T, PlanError>;

/// What writes store: the same bytes every time, or a tag naming the key
/// and the write (so a read can tell which write it sees).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueForm {
    Fixed,
    Tagged,
}

/// The order new keys are created in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOrder {
    Sequential,
    Permuted,
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
    /// With the plan's `tls`: how connections to it are secured.
    pub tls: Option<Tls>,
}

/// The endpoints' authorities joined by commas ("h1:p1,h2:p2"): a server
/// list as ZooKeeper's connect string takes it, and as errors name them.
pub fn authorities(endpoints: &[Endpoint]) -> String {
    endpoints
        .iter()
        .map(|e| e.authority.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub clients: usize,
    pub connections: usize,
    pub requests: u64,
    /// Requests per second; 0 = closed loop.
    pub rate: f64,
}

/// Which keys requests use. Key numbers `first .. first + existing` exist
/// before the run; reads, updates and read-modify-writes choose among them
/// (`latest`: among them and the inserts acknowledged since); insert n
/// creates key `first + existing + order(n)`.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyPlan {
    pub existing: u64,
    pub first: u64,
    /// The key distribution's name (`workload::distribution` resolves it).
    pub choose: String,
    pub zipfian_constant: f64,
    pub hot_set_fraction: f64,
    pub hot_operation_fraction: f64,
    pub inserts: InsertOrder,
    /// How many new keys the run may create (the permutation's length).
    pub insert_space: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The protocol's name (`protocols` resolves it).
    pub protocol: String,
    /// That protocol's options, a dict it reads itself.
    pub options: Value,
    pub endpoints: Vec<Endpoint>,
    /// TLS to the database (each endpoint carries its part); None: plain TCP.
    pub tls: Option<TlsPlan>,
    /// Credentials, a dict whose keys the protocol defines and reads
    /// itself; None: none.
    pub auth: Option<Secret<Value>>,
    pub key_size: usize,
    pub value_size: usize,
    pub values: ValueForm,
    pub keys: KeyPlan,
    /// Each operation's share, by the plan's name for it, in the plan's
    /// order; each a number from 0 to 1 (`workload::mix` resolves them).
    pub mix: Vec<(String, f64)>,
    pub consistency: Consistency,
    pub timeout: Duration,
    pub steps: Vec<Step>,
    pub threads: usize,
    pub max_errors: Option<u64>,
    pub seed: u64,
    /// Added to a request's number to name the write it makes in a tagged
    /// value, so the writes of several runs on one cluster stay distinct.
    pub write_id_base: u64,
    /// Watchers of the keys the run writes (`type: watch`); None: no watch.
    pub watch: Option<WatchPlan>,
    /// Checked clients beside the measured load; None: none.
    pub check: Option<CheckPlan>,
    /// The wall-clock instant (unix ns) the first request is due, once every
    /// connection is open: several load hosts start one schedule together.
    /// 0: as soon as the connections are open.
    pub start_unix_ns: i64,
    /// Kubernetes' objects and traffic (`type: kubernetes`; the plan's
    /// `objects`); None: the key-value load `keys` and `mix` describe.
    pub kubernetes: Option<KubernetesPlan>,
    /// Locks contended for (`type: lock`; the plan's `locks`); None: a load
    /// of keys or objects.
    pub locks: Option<LockPlan>,
}

/// Locks as the kinds' recipes take them: lock n is named
/// `<prefix>lock-<n>/`, under which each contender's recipe makes its key
/// or node; an acquisition holds its lock `hold`, on a session (a lease) of
/// `ttl_s` seconds each locker opens before the load.
#[derive(Debug, Clone, PartialEq)]
pub struct LockPlan {
    pub prefix: String,
    pub count: u64,
    pub hold: Duration,
    pub ttl_s: i64,
    /// Crashes, in time order: at each moment after the load's start, the
    /// holder of the lock (or the next one to take it) stops keeping its
    /// session alive, drops it without ending it and never releases.
    pub expire: Vec<Expiry>,
}

/// One `expire_session` fault: when (from the load's start) and which lock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Expiry {
    pub at: Duration,
    pub lock: u64,
}

/// What a Kubernetes load's requests do with the objects they find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubernetesPhase {
    /// The measured load: the shares of `mix`, over the objects a first
    /// (unmeasured) list finds.
    Run,
    /// The load phase: request r creates object `first + r`.
    Load,
    /// Every request gets object `first` (the readiness check).
    Read,
}

/// Objects as kube-apiserver lays them out in etcd: object n is
/// `<prefix>ns-<n % namespaces>/obj-<n>`, its value `value_size` bytes.
/// The shares (`mix`: get, list, create, update, delete) are resolved by
/// `workload::kubernetes`.
#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesPlan {
    pub phase: KubernetesPhase,
    /// "/registry/<resource>/": what a list ranges over.
    pub prefix: String,
    /// How many objects the load phase made: the run holds their number
    /// between half and one and a half times it.
    pub count: u64,
    pub namespaces: u64,
    /// Objects per page of a list (client-go's pager asks 500).
    pub page_size: u64,
    /// The first object number a load phase creates or a read gets.
    pub first: u64,
    pub mix: Vec<(String, f64)>,
    /// How often the run compacts as kube-apiserver does (None: never).
    pub compaction: Option<Duration>,
    /// How many informers list and watch the objects during the run.
    pub informers: usize,
    /// Events, as the apiserver stores them: leased, and expiring.
    pub events: EventsPlan,
}

/// Kubernetes' events: event n is `<prefix>ns-<n % namespaces>/ev-<n>`,
/// created with a lease, as kube-apiserver's lease manager attaches them:
/// one lease is reused for `reuse` and at most `max_per_lease` events, and
/// granted with a TTL of `ttl_s` plus the reuse time (so an event lives at
/// least `ttl_s`).
#[derive(Debug, Clone, PartialEq)]
pub struct EventsPlan {
    pub prefix: String,
    pub ttl_s: i64,
    pub reuse: Duration,
    pub max_per_lease: u64,
}

/// Checked clients: `clients` of them, each on a connection of its own and
/// one request at a time, reading and writing `keys` keys of their own
/// (unique values) while the measured steps run, every operation recorded
/// for a linearizability check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckPlan {
    pub clients: usize,
    pub keys: usize,
}

/// Watchers of a write run's keys: `watchers` of them over `connections`
/// connections, each watching every key the run writes, from before the
/// first write until every event arrived or `drain` passed after the last.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchPlan {
    pub watchers: usize,
    pub connections: usize,
    pub drain: Duration,
}

impl Plan {
    /// Every step's requests, added up: the number of record slots.
    pub fn total_requests(&self) -> u64 {
        self.steps.iter().map(|s| s.requests).sum()
    }

    /// The index of step `i`'s first request among the whole run's requests.
    pub fn step_base(&self, i: usize) -> u64 {
        self.steps[..i].iter().map(|s| s.requests).sum()
    }

    /// The value every write stores and every read expects, for fixed values.
    pub fn fixed_value(&self) -> Vec<u8> {
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

const TOP_KEYS: &[&str] = &[
    "protocol",
    "endpoints",
    "options",
    "key_size",
    "value_size",
    "values",
    "keys",
    "mix",
    "consistency",
    "timeout_s",
    "steps",
    "threads",
    "max_errors",
    "seed",
    "write_id_base",
    "watch",
    "check",
    "start_unix_ns",
    "tls",
    "auth",
    "objects",
    "locks",
];
const LOCK_KEYS: &[&str] = &["prefix", "count", "hold_s", "ttl_s", "expire"];
const EXPIRE_KEYS: &[&str] = &["at_s", "lock"];
/// More crashes than a test case's faults may hold.
const MAX_EXPIRIES: usize = 100;
/// A lock's session: etcd's TTLs are whole seconds, Consul's at most a day.
const MAX_LOCK_TTL_S: i64 = 86_400;
const KUBERNETES_KEYS: &[&str] = &[
    "phase",
    "prefix",
    "count",
    "namespaces",
    "page_size",
    "first",
    "mix",
    "compaction_interval_s",
    "informers",
    "events_prefix",
    "event_ttl_s",
    "lease_reuse_s",
    "lease_max_objects",
];
/// An event's lease: etcd's TTLs are whole seconds.
const MAX_EVENT_TTL_S: i64 = 366 * 86_400;
/// Informers: each a watch stream and a copy of every object.
const MAX_INFORMERS: i64 = 100;
/// Objects and namespaces: far beyond a cluster's, small enough for a table.
const MAX_OBJECTS: i64 = 1 << 32;
const WATCH_KEYS: &[&str] = &["watchers", "connections", "drain_s"];
const CHECK_KEYS: &[&str] = &["clients", "keys"];
/// Checked clients and keys: a client's id and a key's number fit 16 bits.
const MAX_CHECKED: i64 = 1_000;
/// Watchers per run: each keeps a bit per key written.
const MAX_WATCHERS: i64 = 10_000;
const KEY_KEYS: &[&str] = &[
    "existing",
    "first",
    "choose",
    "inserts",
    "insert_space",
    "zipfian_constant",
    "hot_set_fraction",
    "hot_operation_fraction",
];
const STEP_KEYS: &[&str] = &["clients", "connections", "requests", "rate"];

/// Validates a whole plan.
pub fn parse(value: &Value) -> Result<Plan> {
    let top = Fields::new("plan".into(), value, TOP_KEYS)?;
    let protocol = top.string("protocol", "a protocol's name")?;
    // Any keys: the protocol reads them; here only a dict is required.
    let options = Value::Dict(
        top.entries("options", "a dict of the protocol's options")?
            .to_vec(),
    );
    let mut endpoints = parse_endpoints(&top)?;
    let tls = tls::parse(&top, &mut endpoints)?;
    let auth = parse_auth(&top)?;
    let key_size = top.int("key_size", 1, MAX_KEY_SIZE)? as usize;
    let value_size = top.int("value_size", 0, MAX_VALUE_SIZE)? as usize;
    let values = top.choice(
        "values",
        &[("fixed", ValueForm::Fixed), ("tagged", ValueForm::Tagged)],
        None,
    )?;
    let keys = parse_keys(&top)?;
    let mix = parse_mix(&top)?;
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
    let max_errors = match top.required("max_errors", "None or an int >= 0")? {
        Value::None => None,
        Value::Int(i) if *i >= 0 => Some(*i as u64),
        other => {
            return Err(PlanError(format!(
                "plan[\"max_errors\"] must be None or an int >= 0, got {}",
                other.describe()
            )));
        }
    };
    // Any int is a seed; negative ones keep their bits.
    let seed = top.int("seed", i64::MIN, i64::MAX)? as u64;
    let write_id_base = top.int("write_id_base", 0, i64::MAX)? as u64;
    let watch = parse_watch(&top)?;
    let check = parse_check(&top)?;
    let kubernetes = parse_kubernetes(&top)?;
    let locks = parse_locks(&top)?;
    let start_unix_ns = match top.get("start_unix_ns") {
        None | Some(Value::None) => 0,
        Some(_) => top.int("start_unix_ns", 0, i64::MAX)?,
    };
    let plan = Plan {
        protocol,
        options,
        endpoints,
        tls,
        auth,
        key_size,
        value_size,
        values,
        keys,
        mix,
        consistency,
        timeout,
        steps,
        threads,
        max_errors,
        seed,
        write_id_base,
        watch,
        check,
        start_unix_ns,
        kubernetes,
        locks,
    };
    Ok(plan)
}

/// `locks`: absent or None for a load of keys or objects, else the locks.
fn parse_locks(top: &Fields<'_>) -> Result<Option<LockPlan>> {
    match top.get("locks") {
        None | Some(Value::None) => return Ok(None),
        Some(_) => {}
    }
    let l = top.dict("locks", LOCK_KEYS, None)?;
    let count = l.int("count", 1, MAX_OBJECTS)? as u64;
    Ok(Some(LockPlan {
        prefix: listed_prefix(&l, "prefix")?,
        count,
        hold: Duration::from_secs_f64(l.float("hold_s", 0.0, false, MAX_TIMEOUT_S)?),
        ttl_s: l.int("ttl_s", 1, MAX_LOCK_TTL_S)?,
        expire: parse_expire(&l, count)?,
    }))
}

/// `locks.expire`: absent, or a list of {"at_s", "lock"} in time order.
fn parse_expire(l: &Fields<'_>, count: u64) -> Result<Vec<Expiry>> {
    let allowed = "a list of {\"at_s\", \"lock\"} dicts in time order";
    let name = l.name("expire");
    let items = match l.get("expire") {
        None | Some(Value::None) => return Ok(Vec::new()),
        Some(Value::List(items)) if items.len() <= MAX_EXPIRIES => items,
        Some(other) => {
            return Err(PlanError(format!(
                "{name} must be {allowed} (at most {MAX_EXPIRIES}), got {}",
                other.describe()
            )));
        }
    };
    let mut found: Vec<Expiry> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let e = Fields::new(format!("{name}[{i}]"), item, EXPIRE_KEYS)?;
        let expiry = Expiry {
            at: Duration::from_secs_f64(e.float("at_s", 0.0, false, MAX_TIMEOUT_S)?),
            lock: e.int("lock", 0, count as i64 - 1)? as u64,
        };
        if found.last().is_some_and(|last| last.at > expiry.at) {
            return Err(PlanError(format!(
                "{name}[{i}] is before the one above: {allowed}"
            )));
        }
        found.push(expiry);
    }
    Ok(found)
}

/// `objects`: absent or None for a key-value load, else Kubernetes' objects.
fn parse_kubernetes(top: &Fields<'_>) -> Result<Option<KubernetesPlan>> {
    match top.get("objects") {
        None | Some(Value::None) => return Ok(None),
        Some(_) => {}
    }
    let k = top.dict("objects", KUBERNETES_KEYS, None)?;
    let prefix = listed_prefix(&k, "prefix")?;
    let entries = k.entries("mix", "a dict of shares")?;
    let names: Vec<&str> = entries.iter().map(|(key, _)| key.as_str()).collect();
    let shares = Fields::new(k.name("mix"), k.required("mix", "a dict")?, &names)?;
    let mix = names
        .iter()
        .map(|key| Ok(((*key).to_owned(), shares.fraction(key)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(KubernetesPlan {
        phase: k.choice(
            "phase",
            &[
                ("run", KubernetesPhase::Run),
                ("load", KubernetesPhase::Load),
                ("read", KubernetesPhase::Read),
            ],
            None,
        )?,
        prefix,
        count: k.int("count", 1, MAX_OBJECTS)? as u64,
        namespaces: k.int("namespaces", 1, MAX_OBJECTS)? as u64,
        page_size: k.int("page_size", 1, MAX_OBJECTS)? as u64,
        first: k.int("first", 0, MAX_OBJECTS)? as u64,
        mix,
        compaction: match k.float("compaction_interval_s", 0.0, false, MAX_TIMEOUT_S)? {
            0.0 => None,
            seconds => Some(Duration::from_secs_f64(seconds)),
        },
        informers: k.int("informers", 0, MAX_INFORMERS)? as usize,
        events: EventsPlan {
            prefix: listed_prefix(&k, "events_prefix")?,
            ttl_s: k.int("event_ttl_s", 1, MAX_EVENT_TTL_S)?,
            reuse: Duration::from_secs_f64(k.float(
                "lease_reuse_s",
                0.0,
                false,
                MAX_EVENT_TTL_S as f64,
            )?),
            max_per_lease: k.int("lease_max_objects", 1, MAX_OBJECTS)? as u64,
        },
    }))
}

/// A key prefix that a list or watch ranges over: it must end in "/" (the
/// range's end is the prefix with that byte raised by one).
fn listed_prefix(k: &Fields<'_>, key: &str) -> Result<String> {
    let prefix = k.string(key, "a key prefix ending in \"/\"")?;
    if !prefix.ends_with('/') || prefix.len() < 2 {
        return Err(PlanError(format!(
            "{} must end in \"/\" (a list ranges over it), got {prefix:?}",
            k.name(key)
        )));
    }
    Ok(prefix)
}

/// `auth`: absent or None for none, else a dict the protocol reads (its
/// values are never shown, so neither is a value that is not a dict).
fn parse_auth(top: &Fields<'_>) -> Result<Option<Secret<Value>>> {
    match top.get("auth") {
        None | Some(Value::None) => Ok(None),
        Some(auth @ Value::Dict(_)) => Ok(Some(Secret::new(auth.clone()))),
        Some(other) => Err(PlanError(format!(
            "{} must be None or a dict of the protocol's credentials, got {}",
            top.name("auth"),
            other.kind()
        ))),
    }
}

/// `watch`: absent or None for no watchers, else their count, connections
/// and drain.
fn parse_watch(top: &Fields<'_>) -> Result<Option<WatchPlan>> {
    match top.get("watch") {
        None | Some(Value::None) => return Ok(None),
        Some(_) => {}
    }
    let watch = top.dict("watch", WATCH_KEYS, None)?;
    let watchers = watch.int("watchers", 1, MAX_WATCHERS)? as usize;
    let connections = watch.int("connections", 1, MAX_WATCHERS)? as usize;
    if connections > watchers {
        return Err(PlanError(format!(
            "plan[\"watch\"][\"connections\"] ({connections}) must not exceed its watchers ({watchers})"
        )));
    }
    let drain = Duration::from_secs_f64(watch.float("drain_s", 0.0, false, MAX_TIMEOUT_S)?);
    Ok(Some(WatchPlan {
        watchers,
        connections,
        drain,
    }))
}

/// `check`: absent or None for no checked clients, else their count and
/// their keys'.
fn parse_check(top: &Fields<'_>) -> Result<Option<CheckPlan>> {
    match top.get("check") {
        None | Some(Value::None) => return Ok(None),
        Some(_) => {}
    }
    let check = top.dict("check", CHECK_KEYS, None)?;
    Ok(Some(CheckPlan {
        clients: check.int("clients", 1, MAX_CHECKED)? as usize,
        keys: check.int("keys", 1, MAX_CHECKED)? as usize,
    }))
}

fn parse_keys(top: &Fields<'_>) -> Result<KeyPlan> {
    let keys = top.dict("keys", KEY_KEYS, None)?;
    Ok(KeyPlan {
        existing: keys.int("existing", 0, i64::MAX)? as u64,
        first: keys.int("first", 0, i64::MAX)? as u64,
        choose: keys.string("choose", "a key distribution's name")?,
        // Typed whether or not the distribution uses them.
        zipfian_constant: keys.float("zipfian_constant", 0.0, true, 100.0)?,
        hot_set_fraction: keys.fraction("hot_set_fraction")?,
        hot_operation_fraction: keys.fraction("hot_operation_fraction")?,
        inserts: keys.choice(
            "inserts",
            &[
                ("sequential", InsertOrder::Sequential),
                ("permuted", InsertOrder::Permuted),
            ],
            None,
        )?,
        insert_space: keys.int("insert_space", 0, i64::MAX)? as u64,
    })
}

/// `mix`: a dict of shares, each a number from 0 to 1, by operation name.
fn parse_mix(top: &Fields<'_>) -> Result<Vec<(String, f64)>> {
    let entries = top.entries("mix", "a dict of shares")?;
    let keys: Vec<&str> = entries.iter().map(|(key, _)| key.as_str()).collect();
    let mix = Fields::new(top.name("mix"), top.required("mix", "a dict")?, &keys)?;
    keys.iter()
        .map(|key| Ok(((*key).to_owned(), mix.fraction(key)?)))
        .collect()
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
        tls: None,
    })
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn s(text: &str) -> Value {
        Value::Str(text.into())
    }

    pub(crate) fn dict(entries: &[(&str, Value)]) -> Value {
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

    pub(crate) fn keys(existing: i64, choose: &str) -> Value {
        dict(&[
            ("existing", Value::Int(existing)),
            ("first", Value::Int(0)),
            ("choose", s(choose)),
            ("inserts", s("permuted")),
            ("insert_space", Value::Int(1000)),
            ("zipfian_constant", Value::Float(0.99)),
            ("hot_set_fraction", Value::Float(0.2)),
            ("hot_operation_fraction", Value::Float(0.8)),
        ])
    }

    pub(crate) fn mix(read: f64, update: f64, insert: f64, rmw: f64) -> Value {
        dict(&[
            ("read", Value::Float(read)),
            ("update", Value::Float(update)),
            ("insert", Value::Float(insert)),
            ("read_modify_write", Value::Float(rmw)),
        ])
    }

    /// A write workload's plan: 1000 inserts of keys in random order.
    pub(crate) fn good() -> Vec<(&'static str, Value)> {
        vec![
            ("protocol", s("etcd")),
            ("endpoints", Value::List(vec![s("127.0.0.1:2379")])),
            ("options", dict(&[("balancer", s("pick_first"))])),
            ("key_size", Value::Int(8)),
            ("value_size", Value::Int(16)),
            ("values", s("fixed")),
            ("keys", keys(0, "same")),
            ("mix", mix(0.0, 0.0, 1.0, 0.0)),
            ("consistency", s("linearizable")),
            ("timeout_s", Value::Float(2.5)),
            (
                "steps",
                Value::List(vec![step(10, 2, 600, 0.0), step(20, 4, 400, 100.0)]),
            ),
            ("threads", Value::Int(1)),
            ("max_errors", Value::None),
            ("seed", Value::Int(7)),
            ("write_id_base", Value::Int(0)),
        ]
    }

    pub(crate) fn with(key: &str, value: Value) -> Value {
        let mut entries = good();
        entries.iter_mut().find(|(k, _)| *k == key).unwrap().1 = value;
        dict(&entries)
    }

    pub(crate) fn without(key: &str) -> Value {
        let mut entries = good();
        entries.retain(|(k, _)| *k != key);
        dict(&entries)
    }

    pub(crate) fn error(value: Value) -> String {
        parse(&value).unwrap_err().0
    }

    #[test]
    fn good_plan_parses() {
        let plan = good_plan();
        assert_eq!(plan.protocol, "etcd");
        assert_eq!(plan.options, dict(&[("balancer", s("pick_first"))]));
        assert_eq!(plan.endpoints[0].host, "127.0.0.1");
        assert_eq!(plan.endpoints[0].port, 2379);
        assert_eq!(plan.timeout, Duration::from_millis(2500));
        assert_eq!(plan.total_requests(), 1000);
        assert_eq!(plan.step_base(1), 600);
        assert_eq!(plan.steps[1].rate, 100.0);
        assert_eq!(plan.max_errors, None);
        assert_eq!(plan.fixed_value(), vec![b'v'; 16]);
        assert_eq!(plan.mix[2], ("insert".to_owned(), 1.0));
        assert_eq!(plan.keys.choose, "same");
        assert_eq!(plan.keys.inserts, InsertOrder::Permuted);
    }

    #[test]
    fn a_common_start_is_optional_and_never_before_1970() {
        assert_eq!(good_plan().start_unix_ns, 0);
        let mut entries = good();
        entries.push(("start_unix_ns", Value::Int(1_800_000_000_000_000_000)));
        assert_eq!(
            parse(&dict(&entries)).unwrap().start_unix_ns,
            1_800_000_000_000_000_000
        );
        entries.pop();
        entries.push(("start_unix_ns", Value::Int(-1)));
        let message = parse(&dict(&entries)).unwrap_err().0;
        assert!(
            message.starts_with(r#"plan["start_unix_ns"] must be"#),
            "{message}"
        );
    }

    #[test]
    fn every_key_is_required_defaults_live_in_the_test_case_model() {
        for key in ["options", "max_errors", "seed", "write_id_base", "values"] {
            assert!(error(without(key)).starts_with("plan is missing"), "{key}");
        }
        for (key, expected) in [
            ("options", r#"plan["options"] must be a dict, got "x""#),
            (
                "protocol",
                r#"plan["protocol"] must be a protocol's name, got 3"#,
            ),
            ("mix", r#"plan["mix"] must be a dict, got "x""#),
        ] {
            let value = if key == "protocol" {
                Value::Int(3)
            } else {
                s("x")
            };
            let message = error(with(key, value));
            assert!(message.starts_with(expected), "{message}");
        }
        let message = error(with("mix", dict(&[("read", Value::Float(1.5))])));
        assert!(
            message.starts_with(r#"plan["mix"]["read"] must be a number >= 0 (at most 1)"#),
            "{message}"
        );
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

    fn with_locks(expire: Value) -> Value {
        let mut entries = good();
        let locks = dict(&[
            ("prefix", s("/dbtester-locks/")),
            ("count", Value::Int(2)),
            ("hold_s", Value::Float(0.005)),
            ("ttl_s", Value::Int(4)),
            ("expire", expire),
        ]);
        entries.push(("locks", locks));
        dict(&entries)
    }

    fn expiry(at_s: f64, lock: i64) -> Value {
        dict(&[("at_s", Value::Float(at_s)), ("lock", Value::Int(lock))])
    }

    #[test]
    fn expiries_name_a_lock_of_the_plan_in_time_order() {
        let plan = parse(&with_locks(Value::List(vec![
            expiry(0.5, 1),
            expiry(2.0, 0),
        ])))
        .unwrap();
        let expire = plan.locks.unwrap().expire;
        assert_eq!(expire[0].at, Duration::from_millis(500));
        assert_eq!((expire[0].lock, expire[1].lock), (1, 0));
        let late = error(with_locks(Value::List(vec![
            expiry(2.0, 0),
            expiry(1.0, 0),
        ])));
        assert!(
            late.contains(r#"["expire"][1] is before the one above"#),
            "{late}"
        );
        let missing = error(with_locks(Value::List(vec![expiry(1.0, 2)])));
        assert!(missing.contains(r#"["expire"][0]["lock"]"#), "{missing}");
    }
}
