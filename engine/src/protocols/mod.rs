//! The databases' wire protocols behind one small interface. Each protocol's
//! file owns its name, its options and their parsing; this file holds the
//! interface and the one table that maps a plan's `protocol` to its code.

pub mod consul;
pub mod etcd;
pub mod zookeeper;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;
use crate::outcome::{EngineError, Outcome};
use crate::plan::{Endpoint, Fields, Plan, PlanError, Step};
use crate::records::Records;
use crate::workload::watch::WatchLog;
use crate::workload::{OpKind, Workload};

/// Each protocol's options, as its own file parsed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Options {
    Etcd(etcd::Options),
    ZooKeeper(zookeeper::Options),
    Consul(consul::Options),
}

type ParseOptions = fn(Fields<'_>) -> Result<Options, PlanError>;

/// Every protocol: its name, the keys of its options and their parser.
const PROTOCOLS: &[(&str, &[&str], ParseOptions)] = &[
    (etcd::NAME, etcd::OPTION_KEYS, |f| {
        Ok(Options::Etcd(etcd::options(&f)?))
    }),
    (zookeeper::NAME, zookeeper::OPTION_KEYS, |f| {
        Ok(Options::ZooKeeper(zookeeper::options(&f)?))
    }),
    (consul::NAME, consul::OPTION_KEYS, |f| {
        Ok(Options::Consul(consul::options(&f)?))
    }),
];

/// The plan's `protocol` and its `options`.
pub fn parse_options(top: &Fields<'_>) -> Result<Options, PlanError> {
    let choices: Vec<(&str, usize)> = PROTOCOLS
        .iter()
        .enumerate()
        .map(|(i, (name, _, _))| (*name, i))
        .collect();
    let (name, keys, parse) = PROTOCOLS[top.choice("protocol", &choices, None)?];
    let value = top.required("options", "a dict of the protocol's options")?;
    parse(Fields::owned(top.name("options"), value, keys, Some(name))?)
}

/// Starts the engine on the plan's protocol.
pub fn start(plan: Plan, workload: Workload, records: Records) -> Result<Engine, EngineError> {
    match plan.protocol {
        Options::Etcd(_) => Engine::start_with::<etcd::Etcd>(plan, workload, records),
        Options::ZooKeeper(_) => {
            Engine::start_with::<zookeeper::ZooKeeper>(plan, workload, records)
        }
        Options::Consul(_) => Engine::start_with::<consul::Consul>(plan, workload, records),
    }
}

/// One request as a protocol sends it.
pub struct Request<'a> {
    pub kind: OpKind,
    pub key: &'a [u8],
    /// What a write stores (empty for a read).
    pub value: Bytes,
    /// The key's number, and the workload that judges what a read returns.
    number: u64,
    workload: &'a Workload,
    /// With watchers: where a write's revision goes.
    watch: Option<&'a WatchLog>,
    /// An update of a missing key creates it (a checked client's write).
    pub create_missing: bool,
}

impl<'a> Request<'a> {
    pub fn new(
        kind: OpKind,
        key: &'a [u8],
        value: Bytes,
        number: u64,
        workload: &'a Workload,
    ) -> Self {
        Request {
            kind,
            key,
            value,
            number,
            workload,
            watch: None,
            create_missing: false,
        }
    }

    /// A write that creates its key when it is missing, whatever the plan's keys.
    pub fn creating(mut self) -> Self {
        self.create_missing = true;
        self
    }

    /// A request of a run with watchers, whose writes' revisions `log` keeps.
    pub fn watched(mut self, log: Option<&'a WatchLog>) -> Self {
        self.watch = log;
        self
    }

    /// This write took effect at `revision` (a protocol whose watch events
    /// carry no revision says so, so that their order can be judged).
    pub fn wrote(&self, revision: i64) {
        if let Some(log) = self.watch {
            log.written(self.number, revision);
        }
    }

    /// Whether `value`, read from this request's key, is right.
    pub fn accepts(&self, value: &[u8]) -> bool {
        self.workload.accepts(self.number, value)
    }
}

/// One step's connections to a database. Generic (not boxed) so each
/// protocol's request path compiles down to direct calls.
pub trait Protocol: Sized + Send + Sync + 'static {
    /// Opens `step.connections` connections, all of them before returning
    /// (the step's start barrier); failing to is an engine failure.
    fn open(plan: &Plan, step: &Step) -> impl Future<Output = Result<Self, EngineError>> + Send;

    /// Sends `request` over connection `conn` and checks the reply.
    /// `sent` holds when the call began; a protocol that first waits for its
    /// connection moves it to when the request actually went out.
    fn request(
        &self,
        conn: usize,
        request: &Request<'_>,
        sent: &mut Instant,
    ) -> impl Future<Output = Outcome> + Send;

    /// Closes every connection.
    fn close(self) -> impl Future<Output = ()> + Send;

    /// Reads `key` over connection `conn`, with the plan's consistency: its
    /// value (None: absent), or the outcome of the failure. What a checked
    /// client reads; a protocol that cannot refuses.
    fn read_value(
        &self,
        conn: usize,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Bytes>, Outcome>> + Send {
        let _ = (conn, key);
        async { Err(Outcome::Named("unsupported")) }
    }

    /// The endpoint connection `conn` is on now (after failover, not
    /// necessarily its own); None when the protocol cannot tell. What a
    /// checked operation names as its member.
    fn endpoint(&self, conn: usize) -> impl Future<Output = Option<Endpoint>> + Send {
        let _ = conn;
        async { None }
    }

    /// Puts `plan.watch`'s watchers on the keys the run writes, each
    /// reporting what it receives into `log`; returns once every watch is in
    /// place (before the first write), its tasks running until `stop`. A
    /// protocol that cannot watch refuses.
    fn watch(
        plan: &Plan,
        log: Arc<WatchLog>,
        stop: CancellationToken,
    ) -> impl Future<Output = Result<JoinSet<()>, EngineError>> + Send {
        let _ = (plan, log, stop);
        async { Err(EngineError("this protocol cannot watch".into())) }
    }
}

/// `what` must finish within `limit`, or the engine fails saying so.
pub async fn within<T>(
    limit: Duration,
    what: impl FnOnce() -> String,
    work: impl Future<Output = Result<T, EngineError>>,
) -> Result<T, EngineError> {
    match tokio::time::timeout(limit, work).await {
        Ok(result) => result,
        Err(_) => Err(EngineError(format!(
            "{}: no answer within {:.3} s",
            what(),
            limit.as_secs_f64()
        ))),
    }
}
