//! The driver, above the workload and the protocols: resolves the plan's
//! protocol and starts a load on its own thread and runtime (`engine`),
//! which runs the steps' closed and open loops (`pacing`, timed by
//! `timer`) and the checked clients beside them (`check`).

pub mod check;
pub mod engine;
pub mod informer;
pub mod kubernetes;
pub mod lock;
pub mod pacing;
pub mod timer;

use crate::outcome::EngineError;
use crate::plan::{Plan, PlanError};
use crate::protocols::{self, Protocol, Select};
use crate::records::Records;
use crate::workload::{self, Unfit, Workload};
use engine::Engine;

/// Why a load did not start.
#[derive(Debug)]
pub enum StartError {
    /// The plan names something unknown or asks what the engine cannot run.
    Invalid(PlanError),
    /// This machine cannot hold what the run needs up front.
    Memory(String),
    /// The engine's thread or runtime did not start.
    Engine(EngineError),
}

/// Checks everything the plan names, reserves every record slot (a run
/// too big for memory fails here, not halfway through; reserving does not
/// touch the pages) and starts the engine on the plan's protocol.
pub fn start(plan: Plan) -> Result<Engine, StartError> {
    protocols::select(Launch(plan)).map_err(StartError::Invalid)?
}

struct Launch(Plan);

impl Select for Launch {
    type Output = Result<Engine, StartError>;

    fn plan(&self) -> &Plan {
        &self.0
    }

    fn select<P: Protocol>(self, options: P::Options) -> Self::Output {
        let Launch(plan) = self;
        workload::check(&plan).map_err(StartError::Invalid)?;
        if plan.kubernetes.is_some() && !P::OBJECTS {
            return Err(StartError::Invalid(PlanError(format!(
                "plan[\"objects\"] needs revisions and transactions on objects, which \
                 protocol {:?} does not have",
                P::NAME
            ))));
        }
        if plan.locks.is_some() && !P::LOCKS {
            return Err(StartError::Invalid(PlanError(format!(
                "plan[\"locks\"] needs a lock recipe, which protocol {:?} does not have",
                P::NAME
            ))));
        }
        let total = plan.total_requests();
        let records = Records::with_capacity(total).map_err(|_| {
            StartError::Memory(format!("cannot reserve records for {total} requests"))
        })?;
        let workload = Workload::new(&plan).map_err(|unfit| match unfit {
            Unfit::Plan(error) => StartError::Invalid(error),
            Unfit::Memory => StartError::Memory(format!(
                "cannot hold the workload's random orders and its table of writes \
                 ({} existing keys, {} inserts, {total} requests)",
                plan.keys.existing, plan.keys.insert_space
            )),
        })?;
        Engine::start_with::<P>(plan, options, workload, records).map_err(StartError::Engine)
    }
}

/// The whole plan checked, as `start` checks it before reserving anything.
#[cfg(test)]
fn validate(plan: &Plan) -> Result<(), PlanError> {
    struct Check<'a>(&'a Plan);
    impl Select for Check<'_> {
        type Output = ();
        fn plan(&self) -> &Plan {
            self.0
        }
        fn select<P: Protocol>(self, _: P::Options) {}
    }
    protocols::select(Check(plan))?;
    workload::check(plan).map(|_| ())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::plan::tests::{dict, good, keys, mix, s, step, with, without};
    use crate::plan::{Value, parse};
    use crate::protocols::zookeeper;

    fn error(value: Value) -> String {
        match parse(&value) {
            Ok(plan) => validate(&plan).unwrap_err().0,
            Err(error) => error.0,
        }
    }

    fn checked(value: &Value) -> Result<Plan, PlanError> {
        let plan = parse(value)?;
        validate(&plan)?;
        Ok(plan)
    }

    #[test]
    fn each_bad_key_names_itself_and_what_is_allowed() {
        let cases: Vec<(Value, &str)> = vec![
            (
                with("protocol", s("redis")),
                r#"plan["protocol"] must be one of "etcd", "zookeeper", "consul", "nats", got "redis""#,
            ),
            (
                without("protocol"),
                r#"plan is missing "protocol" (a protocol's name)"#,
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
                with("values", s("random")),
                r#"plan["values"] must be one of "fixed", "tagged", got "random""#,
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
                with("keys", keys(-1, "same")),
                r#"plan["keys"]["existing"] must be an int >= 0, got -1"#,
            ),
            (
                with("keys", keys(0, "gaussian")),
                r#"plan["keys"]["choose"] must be one of "same", "uniform", "zipfian", "latest", "hotspot", got "gaussian""#,
            ),
            (
                with("mix", mix(0.5, 0.0, 0.4, 0.0)),
                r#"plan["mix"]'s shares must add up to 1, got 0.9"#,
            ),
            (
                with("mix", mix(1.5, 0.0, -0.5, 0.0)),
                r#"plan["mix"]["read"] must be a number >= 0 (at most 1)"#,
            ),
            (
                with("mix", mix(1.0, 0.0, 0.0, 0.0)),
                r#"plan["keys"]["existing"] must be at least 1: reads, updates and read-modify-writes choose among existing keys"#,
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
                with(
                    "steps",
                    Value::List(vec![step(10, 2, 600, 0.0), step(20, 4, 401, 100.0)]),
                ),
                r#"plan["keys"]["insert_space"] (1000) must be at least the steps' requests added up (1001)"#,
            ),
            (
                with("key_size", Value::Int(3)),
                r#"plan["keys"] numbers keys up to first (0) + existing (0) + insert_space (1000), which does not fit in plan["key_size"] (3): 100 distinct keys"#,
            ),
            (
                with("values", s("tagged")),
                r#"plan["value_size"] (16) must be at least 32 for tagged values"#,
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
        let plan = checked(&dict(&entries)).unwrap();
        let options = protocols::options::<zookeeper::ZooKeeper>(&plan).unwrap();
        assert_eq!(options.session_timeout, Duration::from_secs(4));
        assert!(options.tls.is_none() && options.digest.is_none());
        entries[0].1 = s("consul");
        assert!(error(dict(&entries)).starts_with(
            r#"plan["options"] has an unknown key "session_timeout_ms"; allowed keys for consul: "lock_delay_s""#
        ));
        entries[2].1 = dict(&[("lock_delay_s", Value::Float(61.0))]);
        assert!(
            error(dict(&entries))
                .starts_with(r#"plan["options"]["lock_delay_s"] must be a number >= 0"#)
        );
        entries[2].1 = dict(&[("lock_delay_s", Value::Int(0))]);
        assert!(checked(&dict(&entries)).is_ok());
    }

    /// `entries` for `protocol` (with its options) and `auth`.
    fn with_auth(protocol: &str, auth: Value) -> Vec<(&'static str, Value)> {
        let mut entries = good();
        entries[0].1 = s(protocol);
        entries[2].1 = match protocol {
            "etcd" => dict(&[("balancer", s("pick_first"))]),
            "zookeeper" => dict(&[("session_timeout_ms", Value::Int(4000))]),
            "consul" => dict(&[("lock_delay_s", Value::Float(15.0))]),
            _ => dict(&[]),
        };
        entries.push(("auth", auth));
        entries
    }

    #[test]
    fn each_protocol_reads_its_own_auth_and_never_shows_it() {
        let user = |password: Value| dict(&[("user", s("root")), ("password", password)]);
        let cases = [
            (
                "etcd",
                dict(&[("token", s("hunter2"))]),
                r#"plan["auth"] has an unknown key "token"; allowed keys for etcd: "user", "password""#,
            ),
            (
                "zookeeper",
                dict(&[("token", s("hunter2"))]),
                r#"plan["auth"] has an unknown key "token"; allowed keys for zookeeper: "user", "password""#,
            ),
            (
                "consul",
                user(s("hunter2")),
                r#"plan["auth"] has an unknown key "user"; allowed keys for consul: "token""#,
            ),
            (
                "etcd",
                dict(&[("user", s("root"))]),
                r#"plan["auth"] is missing "password""#,
            ),
            (
                "etcd",
                user(Value::Int(2_718_281)),
                r#"plan["auth"]["password"] must be the user's password, got an int"#,
            ),
            (
                "etcd",
                s("hunter2"),
                r#"plan["auth"] must be None or a dict of the protocol's credentials, got a string"#,
            ),
            (
                "consul",
                dict(&[("token", s("hunter2\n"))]),
                r#"plan["auth"]["token"] must be text an HTTP header can carry"#,
            ),
            (
                "zookeeper",
                dict(&[("user", s("ro:ot")), ("password", s("hunter2"))]),
                r#"plan["auth"]["user"] must not hold a ":""#,
            ),
        ];
        for (protocol, auth, expected) in cases {
            let message = error(dict(&with_auth(protocol, auth)));
            assert!(message.starts_with(expected), "{protocol}: {message}");
            assert!(
                !message.contains("hunter2") && !message.contains("2718281"),
                "{message}"
            );
        }
        // Absent and None are no auth; a good one parses, and no Debug
        // output shows the password or token.
        assert!(
            checked(&dict(&with_auth("etcd", Value::None)))
                .unwrap()
                .auth
                .is_none()
        );
        let plan = checked(&dict(&with_auth("etcd", user(s("hunter2"))))).unwrap();
        let options = protocols::options::<crate::protocols::etcd::Etcd>(&plan).unwrap();
        assert_eq!(options.auth.as_ref().unwrap().user, "root");
        assert_eq!(options.auth.as_ref().unwrap().password.expose(), "hunter2");
        let plan = checked(&dict(&with_auth("zookeeper", user(s("hunter2"))))).unwrap();
        let zookeeper = protocols::options::<zookeeper::ZooKeeper>(&plan).unwrap();
        assert_eq!(zookeeper.digest.as_ref().unwrap().expose(), b"root:hunter2");
        let plan = checked(&dict(&with_auth(
            "consul",
            dict(&[("token", s("hunter2"))]),
        )))
        .unwrap();
        let consul = protocols::options::<crate::protocols::consul::Consul>(&plan).unwrap();
        let debug = format!("{plan:?} {options:?} {zookeeper:?} {consul:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
    }

    #[test]
    fn zookeeper_takes_tls_but_no_server_name() {
        let pki = crate::plan::pki::Pki::new();
        let mut entries = with_auth("zookeeper", Value::None);
        entries.push(("tls", pki.plan(&pki.ca, true)));
        let plan = checked(&dict(&entries)).unwrap();
        let options = protocols::options::<zookeeper::ZooKeeper>(&plan).unwrap();
        assert!(options.tls.is_some());
        assert!(!format!("{options:?}").contains("BEGIN"));
        entries.pop();
        entries.push((
            "tls",
            dict(&[("ca", s(&pki.ca)), ("server_name", s("zk.example"))]),
        ));
        assert!(error(dict(&entries)).starts_with(
            r#"plan["tls"]["server_name"] must be None for zookeeper: its client checks"#
        ));
    }

    #[test]
    fn key_numbers_must_fit() {
        // key_size 8 holds 10,000,000 keys: 9,999,001 + 1000 do not fit.
        let mut entries = good();
        let mut with_first = |first: i64| {
            let mut keys = keys(0, "same");
            if let Value::Dict(entries) = &mut keys {
                entries[1].1 = Value::Int(first);
            }
            entries[6].1 = keys;
            checked(&dict(&entries))
        };
        assert_eq!(with_first(9_999_000).unwrap().keys.first, 9_999_000);
        let error = with_first(9_999_001).unwrap_err().0;
        assert!(error.contains("first (9999001)"), "{error}");
        assert!(with_first(-1).is_err());
    }

    #[test]
    fn insert_space_only_matters_when_inserting() {
        // Reads (and updates) of one key: a tiny key_size is fine.
        let mut entries = good();
        entries[3].1 = Value::Int(1);
        entries[6].1 = keys(1, "same");
        entries[7].1 = mix(1.0, 0.0, 0.0, 0.0);
        assert!(checked(&dict(&entries)).is_ok());
        entries[7].1 = mix(0.0, 0.0, 1.0, 0.0);
        assert!(checked(&dict(&entries)).is_err());
        entries[7].1 = mix(0.0, 1.0, 0.0, 0.0);
        assert!(checked(&dict(&entries)).is_ok());
    }
}
