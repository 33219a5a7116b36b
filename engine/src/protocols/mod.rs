//! The databases' wire protocols behind one small interface. Each protocol
//! owns its name, its options and credentials and their parsing (the
//! trait's `NAME`, `OPTION_KEYS`, `AUTH_KEYS`, `Options` and `options`);
//! this file holds the interface and `select`, the one list of protocols,
//! which hands the plan's to whoever runs it.

pub mod consul;
pub mod etcd;
pub mod nats;
pub mod zookeeper;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::outcome::{EngineError, Outcome};
use crate::plan::{Endpoint, Fields, Plan, PlanError, Step, TlsPlan, quoted};
use crate::workload::watch::WatchLog;
use crate::workload::{OpKind, Workload};

/// What to do with the plan's protocol once it is known: generic over the
/// protocol, so its request path compiles down to direct calls.
pub trait Select {
    type Output;

    /// The plan whose `protocol` and `options` are read.
    fn plan(&self) -> &Plan;

    fn select<P: Protocol>(self, options: P::Options) -> Self::Output;
}

/// Resolves the plan's `protocol` and reads its `options`, then hands both
/// to `with`. The one list of the protocols there are.
pub fn select<S: Select>(with: S) -> Result<S::Output, PlanError> {
    let name = with.plan().protocol.as_str();
    if name == etcd::Etcd::NAME {
        return choose::<etcd::Etcd, S>(with);
    }
    if name == zookeeper::ZooKeeper::NAME {
        return choose::<zookeeper::ZooKeeper, S>(with);
    }
    if name == consul::Consul::NAME {
        return choose::<consul::Consul, S>(with);
    }
    if name == nats::Nats::NAME {
        return choose::<nats::Nats, S>(with);
    }
    let names = [
        etcd::Etcd::NAME,
        zookeeper::ZooKeeper::NAME,
        consul::Consul::NAME,
        nats::Nats::NAME,
    ];
    Err(PlanError(format!(
        "plan[\"protocol\"] must be one of {}, got {name:?}",
        quoted(&names)
    )))
}

fn choose<P: Protocol, S: Select>(with: S) -> Result<S::Output, PlanError> {
    let options = options::<P>(with.plan())?;
    Ok(with.select::<P>(options))
}

/// The plan's `options` and `auth`, read by protocol `P`.
pub fn options<P: Protocol>(plan: &Plan) -> Result<P::Options, PlanError> {
    let options = Fields::owned(
        "plan[\"options\"]".into(),
        &plan.options,
        P::OPTION_KEYS,
        Some(P::NAME),
    )?;
    let auth = match &plan.auth {
        None => None,
        Some(auth) => Some(Fields::opaque(
            "plan[\"auth\"]".into(),
            auth.expose(),
            P::AUTH_KEYS,
            Some(P::NAME),
        )?),
    };
    P::options(&Given {
        options,
        auth,
        tls: plan.tls.as_ref(),
    })
}

/// What a protocol reads for itself: the plan's `options` and `auth`, each
/// checked to hold only the keys the protocol names (`auth` None: no
/// credentials), and the plan's `tls` (None: plain TCP), for a protocol
/// whose client library does TLS itself or cannot do all of it.
pub struct Given<'a> {
    pub options: Fields<'a>,
    pub auth: Option<Fields<'a>>,
    pub tls: Option<&'a TlsPlan>,
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

/// What a read of one object found: the revision the database answered at
/// and the object's mod_revision (None: it is not there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub revision: i64,
    pub object: Option<i64>,
}

/// What a write conditioned on an object's mod_revision did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Applied at this revision.
    Done(i64),
    /// Not applied: the object was not as expected; here is what it is.
    Changed(Seen),
}

/// One page of a list: the database's revision when it answered (for a page
/// read at a past revision, not that one), each object's key and
/// mod_revision, whether more follow, and the reply's size in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub revision: i64,
    pub objects: Vec<(Bytes, i64)>,
    pub more: bool,
    pub bytes: usize,
}

/// A compaction claimed, or not, as kube-apiserver's compactor claims it: the
/// compact key's version after the step, and the database's revision then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub claimed: bool,
    pub version: i64,
    pub revision: i64,
}

/// What an informer's watch of the objects delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum News {
    /// Changes, in the order the database sent them.
    Events(Vec<ObjectEvent>),
    /// Every change up to this revision has been delivered (a progress
    /// notification).
    Progress(i64),
    /// The watch's start was compacted away; this is the oldest revision
    /// kept. The watch is over: the informer lists again.
    Compacted(i64),
}

/// One change of one object: its key, the revision of the change, whether
/// it was a delete, and the value it was given (empty for a delete).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    pub key: Bytes,
    pub revision: i64,
    pub deleted: bool,
    pub value: Bytes,
}

/// A lock as its locker holds it: the key the recipe made or took, and the
/// fencing token the database gave this acquisition (etcd: the key's
/// create revision; ZooKeeper: the node's sequence number; Consul: the
/// key's LockIndex), which rises from one holder of a lock to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub key: Bytes,
    pub token: i64,
}

/// The refusal of a protocol without Kubernetes' storage operations.
async fn no_objects<T>() -> Result<T, Outcome> {
    Err(Outcome::Named("unsupported"))
}

/// One step's connections to a database. Generic (not boxed) so each
/// protocol's request path compiles down to direct calls.
pub trait Protocol: Sized + Send + Sync + 'static {
    /// Its name in the plan's `protocol`.
    const NAME: &'static str;
    /// The keys of its `options`, every one required.
    const OPTION_KEYS: &'static [&'static str];
    /// The keys of its `auth`, every one required when `auth` is given.
    const AUTH_KEYS: &'static [&'static str];
    /// Its options and credentials, as `options` reads them (a Debug that
    /// shows no password or token).
    type Options: Clone + Send + Sync + std::fmt::Debug + 'static;

    /// Reads the plan's `options` and `auth` (only `OPTION_KEYS` and
    /// `AUTH_KEYS` are there) and checks that it can do the plan's `tls`.
    fn options(given: &Given<'_>) -> Result<Self::Options, PlanError>;

    /// Opens `step.connections` connections, all of them before returning
    /// (the step's start barrier); failing to is an engine failure.
    fn open(
        plan: &Plan,
        options: Self::Options,
        step: &Step,
    ) -> impl Future<Output = Result<Self, EngineError>> + Send;

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

    /// Whether it has the storage operations kube-apiserver uses (the
    /// `*_object` and `list_page` methods): revisions and transactions.
    const OBJECTS: bool = false;

    /// Reads one object (linearizable).
    fn get_object(
        &self,
        conn: usize,
        key: &[u8],
    ) -> impl Future<Output = Result<Seen, Outcome>> + Send {
        let _ = (conn, key);
        no_objects()
    }

    /// Creates an object if it is not there (its mod_revision is 0),
    /// attached to `lease` (0: none).
    fn create_object(
        &self,
        conn: usize,
        key: &[u8],
        value: Bytes,
        lease: i64,
    ) -> impl Future<Output = Result<Written, Outcome>> + Send {
        let _ = (conn, key, value, lease);
        no_objects()
    }

    /// Grants a lease of `ttl_s` seconds; its id.
    fn grant_lease(
        &self,
        conn: usize,
        ttl_s: i64,
    ) -> impl Future<Output = Result<i64, Outcome>> + Send {
        let _ = (conn, ttl_s);
        no_objects()
    }

    /// Replaces an object if its mod_revision is still `expected`, else reads it.
    fn update_object(
        &self,
        conn: usize,
        key: &[u8],
        value: Bytes,
        expected: i64,
    ) -> impl Future<Output = Result<Written, Outcome>> + Send {
        let _ = (conn, key, value, expected);
        no_objects()
    }

    /// Deletes an object if its mod_revision is still `expected`, else reads it.
    fn delete_object(
        &self,
        conn: usize,
        key: &[u8],
        expected: i64,
    ) -> impl Future<Output = Result<Written, Outcome>> + Send {
        let _ = (conn, key, expected);
        no_objects()
    }

    /// Up to `limit` objects from `from` (inclusive) to `end` (exclusive),
    /// at `revision` (0: the latest).
    fn list_page(
        &self,
        conn: usize,
        from: &[u8],
        end: &[u8],
        limit: u64,
        revision: i64,
    ) -> impl Future<Output = Result<Page, Outcome>> + Send {
        let _ = (conn, from, end, limit, revision);
        no_objects()
    }

    /// kube-apiserver's compaction claim: if the compact key's version is
    /// still `version`, put `revision` there (one apiserver of several
    /// wins), else read it.
    fn claim_compaction(
        &self,
        conn: usize,
        version: i64,
        revision: i64,
    ) -> impl Future<Output = Result<Claim, Outcome>> + Send {
        let _ = (conn, version, revision);
        no_objects()
    }

    /// Compacts every revision before `revision` away, returning once the
    /// database has removed them (so the reply marks the compaction's end).
    fn compact(
        &self,
        conn: usize,
        revision: i64,
    ) -> impl Future<Output = Result<(), Outcome>> + Send {
        let _ = (conn, revision);
        no_objects()
    }

    /// Watches the objects from `from` to `end` from `revision` on, over
    /// connection `conn`, as an informer does: sends what arrives into
    /// `news`, and asks the database for a progress notification each time
    /// `progress` is notified. Returns when the stream ends or `news` is
    /// closed (Ok), or the watch could not be made (the outcome).
    fn inform(
        &self,
        conn: usize,
        range: (Bytes, Bytes),
        revision: i64,
        news: tokio::sync::mpsc::Sender<News>,
        progress: Arc<tokio::sync::Notify>,
    ) -> impl Future<Output = Result<(), Outcome>> + Send {
        let _ = (conn, range, revision, news, progress);
        no_objects()
    }

    /// Whether it has a lock recipe (`open_session`, `acquire`, `release`).
    const LOCKS: bool = false;

    /// What a locker's locks live and die with (etcd: a lease kept alive;
    /// ZooKeeper: the connection's session; Consul: a session renewed).
    type Session: Send + Sync + 'static;

    /// Opens a locker's session of `ttl_s` seconds on connection `conn`,
    /// kept alive until `close_session`.
    fn open_session(
        &self,
        conn: usize,
        ttl_s: i64,
    ) -> impl Future<Output = Result<Self::Session, Outcome>> + Send {
        let _ = (conn, ttl_s);
        async { Err(Outcome::Named("unsupported")) }
    }

    /// Acquires the lock named `lock` (a key prefix ending in "/") for the
    /// locker of `session`, returning once it holds it.
    fn acquire(
        &self,
        conn: usize,
        session: &Self::Session,
        lock: &[u8],
    ) -> impl Future<Output = Result<Held, Outcome>> + Send {
        let _ = (conn, session, lock);
        async { Err(Outcome::Named("unsupported")) }
    }

    /// Releases a lock `acquire` gave.
    fn release(
        &self,
        conn: usize,
        session: &Self::Session,
        held: &Held,
    ) -> impl Future<Output = Result<(), Outcome>> + Send {
        let _ = (conn, session, held);
        async { Err(Outcome::Named("unsupported")) }
    }

    /// Takes back whatever claim the locker of `session` left on `lock`
    /// after an acquire that failed or was given up (etcd: its key; a
    /// recipe without one does nothing).
    fn withdraw(
        &self,
        conn: usize,
        session: &Self::Session,
        lock: &[u8],
    ) -> impl Future<Output = ()> + Send {
        let _ = (conn, session, lock);
        async {}
    }

    /// Ends a session (its locks, if any, go with it).
    fn close_session(
        &self,
        conn: usize,
        session: Self::Session,
    ) -> impl Future<Output = ()> + Send {
        let _ = (conn, session);
        async {}
    }

    /// Leaves a session as a crashed client would: no more keep-alives, its
    /// own connection (if it has one) dropped, nothing ended or released,
    /// so its locks go only when the database expires it.
    fn abandon_session(
        &self,
        conn: usize,
        session: Self::Session,
    ) -> impl Future<Output = ()> + Send {
        let _ = (conn, session);
        async {}
    }

    /// Puts `plan.watch`'s watchers on the keys the run writes, each
    /// reporting what it receives into `log`; returns once every watch is in
    /// place (before the first write), its tasks running until `stop`. A
    /// protocol that cannot watch refuses.
    fn watch(
        plan: &Plan,
        options: Self::Options,
        log: Arc<WatchLog>,
        stop: CancellationToken,
    ) -> impl Future<Output = Result<JoinSet<()>, EngineError>> + Send {
        let _ = (plan, options, log, stop);
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
