//! etcd over gRPC: one HTTP/2 connection per connection (see
//! transport/grpc.rs), hand-written prost messages carrying only the fields
//! used, and the Range and Put replies read where they lie rather than
//! decoded into structs (field numbers from etcd's rpc.proto, as in
//! dbtester/proto/etcd.proto). A read is a Range, an update or insert a Put,
//! and a read-modify-write a Range, then a Txn that puts only if the key's
//! mod_revision is still the one read (a lost race: `conflict`).
//!
//! With the plan's `auth`, every connection (the load's, the watchers', the
//! checked clients', the leader lookup's) authenticates as clientv3 does:
//! Auth.Authenticate on each new connection, its token in the `token`
//! metadata of every call, and a new token when etcd refuses the one a
//! call carried (a simple token expires after 5 idle minutes, and a
//! restarted member forgets its tokens).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::try_join_all;
use http::{HeaderName, HeaderValue, Uri};
use prost::Message;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

mod inform;
mod kube;
mod lock;

use crate::outcome::{EngineError, Outcome, chain};
use crate::plan::{Consistency, Endpoint, Plan, PlanError, Secret, Step};
use crate::protocols::{Claim, Given, Held, News, Page, Protocol, Request, Seen, Written, within};
use crate::transport::failover::{dial_bound, ordered, ordered_from};
use crate::transport::grpc::{
    BoxError, Caller, Code, Conn, Credential, Failure, Login, Stream, frame,
};
use crate::workload::watch::{WatchLog, key_number, unless_stopped};
use crate::workload::{OpKind, keys};

/// Which member each connection goes to (as clientv3's balancers pick).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balancer {
    PickFirst,
    RoundRobin,
    Leader,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub balancer: Balancer,
    /// Who to authenticate as (the plan's `auth`); None: no auth.
    pub auth: Option<Arc<Credentials>>,
}

/// An etcd user and its password (Debug does not show the password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: Secret<String>,
}

const PUT: &str = "/etcdserverpb.KV/Put";
const RANGE: &str = "/etcdserverpb.KV/Range";
const TXN: &str = "/etcdserverpb.KV/Txn";
const STATUS: &str = "/etcdserverpb.Maintenance/Status";
const WATCH: &str = "/etcdserverpb.Watch/Watch";
const AUTHENTICATE: &str = "/etcdserverpb.Auth/Authenticate";
/// The metadata etcd reads a call's auth token from.
const TOKEN: HeaderName = HeaderName::from_static("token");

/// Debug (written below) does not show the password.
#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub struct AuthenticateRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub password: String,
}

impl std::fmt::Debug for AuthenticateRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthenticateRequest")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Debug (written below) does not show the token.
#[derive(Clone, PartialEq, prost::Message)]
#[prost(skip_debug)]
pub struct AuthenticateResponse {
    #[prost(string, tag = "2")]
    pub token: String,
}

impl std::fmt::Debug for AuthenticateResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthenticateResponse")
            .finish_non_exhaustive()
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PutRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bool, tag = "7")]
    pub serializable: bool,
    #[prost(bool, tag = "9")]
    pub count_only: bool,
}

/// A Txn that puts `success` only if the key's mod_revision is unchanged,
/// and reads the key again (`failure`) if it changed: the shape of
/// kube-apiserver's updates, the only one kine accepts.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<RequestOp>,
    #[prost(message, repeated, tag = "3")]
    pub failure: Vec<RequestOp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Compare {
    /// CompareResult: EQUAL is 0.
    #[prost(int32, tag = "1")]
    pub result: i32,
    /// CompareTarget: MOD is 2.
    #[prost(int32, tag = "2")]
    pub target: i32,
    #[prost(bytes = "bytes", tag = "3")]
    pub key: Bytes,
    #[prost(int64, tag = "6")]
    pub mod_revision: i64,
}

const COMPARE_EQUAL: i32 = 0;
const TARGET_MOD: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestOp {
    #[prost(message, optional, tag = "1")]
    pub request_range: Option<RangeRequest>,
    #[prost(message, optional, tag = "2")]
    pub request_put: Option<PutRequest>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnResponse {
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(uint64, tag = "4")]
    pub leader: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHeader {
    #[prost(uint64, tag = "2")]
    pub member_id: u64,
    #[prost(int64, tag = "3")]
    pub revision: i64,
}

/// A Watch stream's request: a watch to create, or (an informer's) a
/// request for progress.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchRequest {
    #[prost(message, optional, tag = "1")]
    pub create_request: Option<WatchCreateRequest>,
    #[prost(message, optional, tag = "3")]
    pub progress_request: Option<ProgressRequest>,
}

/// Watch the keys from `key` up to (not including) `range_end`, from
/// `start_revision` on (0: from now), with progress notifications or not.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchCreateRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub range_end: Bytes,
    #[prost(int64, tag = "3")]
    pub start_revision: i64,
    #[prost(bool, tag = "4")]
    pub progress_notify: bool,
}

/// Asks for a progress notification of every watch on the stream.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProgressRequest {}

/// The fields of a WatchResponse a watcher reads (events' values are skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(int64, tag = "2")]
    pub watch_id: i64,
    #[prost(bool, tag = "3")]
    pub created: bool,
    #[prost(bool, tag = "4")]
    pub canceled: bool,
    #[prost(int64, tag = "5")]
    pub compact_revision: i64,
    #[prost(string, tag = "6")]
    pub cancel_reason: String,
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<WatchEvent>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchEvent {
    #[prost(message, optional, tag = "2")]
    pub kv: Option<WatchedKey>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchedKey {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
}

/// A connection and the URIs of the methods requests call on it.
struct Target {
    conn: Conn,
    range: Uri,
    put: Uri,
    txn: Uri,
}

pub struct Etcd {
    targets: Vec<Target>,
    serializable: bool,
}

impl Protocol for Etcd {
    const NAME: &'static str = "etcd";
    const OPTION_KEYS: &'static [&'static str] = &["balancer"];
    const AUTH_KEYS: &'static [&'static str] = &["user", "password"];
    type Options = Options;

    fn options(given: &Given<'_>) -> Result<Options, PlanError> {
        let auth = match &given.auth {
            None => None,
            Some(auth) => Some(Arc::new(Credentials {
                user: auth.string("user", "an etcd user's name")?,
                password: Secret::new(auth.secret("password", "the user's password")?.to_owned()),
            })),
        };
        let fields = &given.options;
        Ok(Options {
            auth,
            balancer: fields.choice(
                "balancer",
                &[
                    ("pick_first", Balancer::PickFirst),
                    ("round_robin", Balancer::RoundRobin),
                    ("leader", Balancer::Leader),
                ],
                None,
            )?,
        })
    }

    async fn open(plan: &Plan, options: Options, step: &Step) -> Result<Self, EngineError> {
        let balancer = options.balancer;
        let leader = if balancer == Balancer::Leader {
            Some(leader(plan, &options).await?)
        } else {
            None
        };
        let options = &options;
        let targets = try_join_all((0..step.connections).map(|c| {
            // Its own endpoint as the balancer picks it, then the others
            // after it: where it goes when its own does not accept.
            let endpoints = match (balancer, &leader) {
                (Balancer::Leader, Some(leader)) => ordered_from(&plan.endpoints, leader),
                (Balancer::PickFirst, _) => ordered(&plan.endpoints, 0),
                _ => ordered(&plan.endpoints, c % plan.endpoints.len()),
            };
            async move {
                let target = &endpoints[0];
                let conn = connect(plan, options, endpoints.clone()).await?;
                probe(plan, target, &conn).await?;
                Ok::<_, EngineError>(Target {
                    range: conn.uri(RANGE),
                    put: conn.uri(PUT),
                    txn: conn.uri(TXN),
                    conn,
                })
            }
        }))
        .await?;
        Ok(Etcd {
            targets,
            serializable: plan.consistency == Consistency::Serializable,
        })
    }

    /// Each watch connection carries one Watch stream with its share of the
    /// watchers (as clientv3 multiplexes the watches of a client), each a
    /// watch of the run's key range created on it in turn; etcd answers the
    /// creates in order, which maps each watch id to its watcher. A stream
    /// that ends (its member killed, the connection cut) is opened again
    /// and each watch created anew from the revision after the last one its
    /// watcher saw, as clientv3 resumes; a watch etcd cancels (its start
    /// compacted away) is not, and what it did not deliver counts as missed.
    async fn watch(
        plan: &Plan,
        options: Options,
        log: Arc<WatchLog>,
        stop: CancellationToken,
    ) -> Result<JoinSet<()>, EngineError> {
        let watch = plan.watch.expect("watchers are planned");
        let mut tasks = JoinSet::new();
        for c in 0..watch.connections {
            let endpoints = ordered(&plan.endpoints, c % plan.endpoints.len());
            let authority = endpoints[0].authority.clone();
            let named = authority.clone();
            let what = move || format!("etcd at {named} did not create its watches");
            let mut watching = Watching {
                conn: connect(plan, &options, endpoints).await?,
                authority,
                range: run_range(plan),
                watchers: (c..watch.watchers)
                    .step_by(watch.connections)
                    .map(|index| Watcher {
                        index,
                        next: 0,
                        ended: None,
                    })
                    .collect(),
                log: log.clone(),
                timeout: plan.timeout,
            };
            let stream = within(plan.timeout, what, watching.create()).await?;
            tasks.spawn(watching.run(stream, stop.clone()));
        }
        Ok(tasks)
    }

    async fn request(&self, conn: usize, request: &Request<'_>, _sent: &mut Instant) -> Outcome {
        let target = &self.targets[conn];
        let key = Bytes::copy_from_slice(request.key);
        match request.kind {
            OpKind::Read => {
                let reply = self.range(target, key, |kv| {
                    kv.is_some_and(|(value, _)| request.accepts(value))
                });
                range_outcome(reply.await)
            }
            OpKind::Update | OpKind::Insert => {
                let put = frame(&PutRequest {
                    key,
                    value: request.value.clone(),
                });
                // Its header is not needed: a reply that decodes is a success.
                let decodes = |reply: &[u8]| well_formed(reply).then_some(());
                match target.conn.unary(&target.put, put, decodes).await {
                    Ok(()) => Outcome::Ok,
                    Err(failure) => failure_outcome(&failure),
                }
            }
            OpKind::ReadModifyWrite => self.read_modify_write(target, key, request).await,
        }
    }

    async fn endpoint(&self, conn: usize) -> Option<Endpoint> {
        Some(self.targets[conn].conn.endpoint())
    }

    const OBJECTS: bool = true;

    async fn get_object(&self, conn: usize, key: &[u8]) -> Result<Seen, Outcome> {
        self.get_one(conn, key).await
    }

    async fn create_object(
        &self,
        conn: usize,
        key: &[u8],
        value: Bytes,
        lease: i64,
    ) -> Result<Written, Outcome> {
        let put = kube::put_leased(key, value, lease);
        self.txn(conn, kube::conditional(key, 0, put)).await
    }

    async fn grant_lease(&self, conn: usize, ttl_s: i64) -> Result<i64, Outcome> {
        self.grant(conn, ttl_s).await
    }

    async fn update_object(
        &self,
        conn: usize,
        key: &[u8],
        value: Bytes,
        expected: i64,
    ) -> Result<Written, Outcome> {
        self.txn(
            conn,
            kube::conditional(key, expected, kube::put(key, value)),
        )
        .await
    }

    async fn delete_object(
        &self,
        conn: usize,
        key: &[u8],
        expected: i64,
    ) -> Result<Written, Outcome> {
        self.txn(conn, kube::conditional(key, expected, kube::delete(key)))
            .await
    }

    async fn claim_compaction(
        &self,
        conn: usize,
        version: i64,
        revision: i64,
    ) -> Result<Claim, Outcome> {
        self.claim(conn, version, revision).await
    }

    async fn compact(&self, conn: usize, revision: i64) -> Result<(), Outcome> {
        self.compact_to(conn, revision).await
    }

    async fn list_page(
        &self,
        conn: usize,
        from: &[u8],
        end: &[u8],
        limit: u64,
        revision: i64,
    ) -> Result<Page, Outcome> {
        self.page(conn, from, end, limit, revision).await
    }

    async fn inform(
        &self,
        conn: usize,
        range: (Bytes, Bytes),
        revision: i64,
        news: tokio::sync::mpsc::Sender<News>,
        progress: Arc<tokio::sync::Notify>,
    ) -> Result<(), Outcome> {
        self.inform_on(conn, range, revision, news, progress).await
    }

    const LOCKS: bool = true;
    type Session = lock::LockSession;

    async fn open_session(&self, conn: usize, ttl_s: i64) -> Result<Self::Session, Outcome> {
        self.open_lock_session(conn, ttl_s).await
    }

    async fn acquire(
        &self,
        conn: usize,
        session: &Self::Session,
        name: &[u8],
    ) -> Result<Held, Outcome> {
        self.acquire_lock(conn, session, name).await
    }

    async fn release(&self, conn: usize, _: &Self::Session, held: &Held) -> Result<(), Outcome> {
        self.release_lock(conn, held).await
    }

    async fn withdraw(&self, conn: usize, session: &Self::Session, name: &[u8]) {
        self.withdraw_lock(conn, session, name).await;
    }

    async fn close_session(&self, conn: usize, session: Self::Session) {
        self.close_lock_session(conn, session).await;
    }

    async fn abandon_session(&self, _: usize, session: Self::Session) {
        Self::abandon_lock_session(session).await;
    }

    async fn read_value(&self, conn: usize, key: &[u8]) -> Result<Option<Bytes>, Outcome> {
        let key = Bytes::copy_from_slice(key);
        let value = |kv: Option<(&[u8], i64)>| kv.map(|(v, _)| Bytes::copy_from_slice(v));
        self.range(&self.targets[conn], key, value)
            .await
            .map_err(|failure| failure_outcome(&failure))
    }

    async fn close(self) {
        // Dropping a connection closes its socket.
        drop(self.targets);
    }
}

impl Etcd {
    /// A Range of `key`; `judge` sees its first key-value (value and
    /// mod_revision; None: the key is missing).
    async fn range<T>(
        &self,
        target: &Target,
        key: Bytes,
        judge: impl Fn(Option<(&[u8], i64)>) -> T,
    ) -> Result<T, Failure> {
        let range = frame(&RangeRequest {
            key,
            serializable: self.serializable,
            count_only: false,
        });
        let read = |reply: &[u8]| first_kv(reply).ok().map(&judge);
        target.conn.unary(&target.range, range, read).await
    }

    /// Reads the key, checks its value, then puts the new value in a Txn
    /// that compares the mod_revision read.
    async fn read_modify_write(
        &self,
        target: &Target,
        key: Bytes,
        request: &Request<'_>,
    ) -> Outcome {
        let read = self.range(target, key.clone(), |kv| match kv {
            Some((value, revision)) if request.accepts(value) => Some(revision),
            _ => None,
        });
        let revision = match read.await {
            Ok(Some(revision)) => revision,
            Ok(None) => return Outcome::WrongValue,
            Err(failure) => return failure_outcome(&failure),
        };
        let txn = frame(&update_txn(key, request.value.clone(), revision));
        let decode = |reply: &[u8]| TxnResponse::decode(reply).ok().map(|r| r.succeeded);
        match target.conn.unary(&target.txn, txn, decode).await {
            Ok(true) => Outcome::Ok,
            Ok(false) => Outcome::Conflict,
            Err(failure) => failure_outcome(&failure),
        }
    }
}

/// Put `value` at `key` if its mod_revision is still `revision`, else read
/// it: kube-apiserver's update (GuaranteedUpdate), the Txn shape kine
/// accepts. etcd runs the failure's read only on a conflict, so the path
/// that succeeds costs what a bare compare-and-put does.
fn update_txn(key: Bytes, value: Bytes, revision: i64) -> TxnRequest {
    TxnRequest {
        compare: vec![Compare {
            result: COMPARE_EQUAL,
            target: TARGET_MOD,
            key: key.clone(),
            mod_revision: revision,
        }],
        success: vec![RequestOp {
            request_range: None,
            request_put: Some(PutRequest {
                key: key.clone(),
                value,
            }),
        }],
        failure: vec![RequestOp {
            request_range: Some(RangeRequest {
                key,
                serializable: false,
                count_only: false,
            }),
            request_put: None,
        }],
    }
}

/// Whether a RangeResponse's first key-value holds `value` (no key-value:
/// it does not); None if it is not a RangeResponse.
#[cfg(test)]
fn holds(reply: &[u8], value: &[u8]) -> Option<bool> {
    let first = first_value(reply).ok()?;
    Some(first == Some(value))
}

fn range_outcome(reply: Result<bool, Failure>) -> Outcome {
    match reply {
        Ok(true) => Outcome::Ok,
        Ok(false) => Outcome::WrongValue,
        Err(failure) => failure_outcome(&failure),
    }
}

/// The range of keys a run writes: its first key up to the one after its
/// last (keys are fixed-width, so their order is their numbers' order).
fn run_range(plan: &Plan) -> WatchCreateRequest {
    let mut from = Vec::new();
    let mut to = Vec::new();
    keys::write_key(plan.keys.first, plan.key_size, &mut from);
    if !keys::write_key(
        plan.keys.first + plan.total_requests(),
        plan.key_size,
        &mut to,
    ) {
        to = vec![keys::PREFIX + 1]; // past the last key there can be
    }
    WatchCreateRequest {
        key: Bytes::from(from),
        range_end: Bytes::from(to),
        start_revision: 0,
        progress_notify: false,
    }
}

/// One watcher on a Watch stream.
struct Watcher {
    /// Its index in the log.
    index: usize,
    /// The revision its watch resumes from: one past the last it saw.
    next: i64,
    /// The last event of its last reply: revision and key.
    ended: Option<(i64, u64)>,
}

/// One Watch stream's watchers, kept across the streams it takes.
struct Watching {
    conn: Conn,
    authority: String,
    range: WatchCreateRequest,
    /// Those still watching (a cancelled watch leaves).
    watchers: Vec<Watcher>,
    log: Arc<WatchLog>,
    timeout: Duration,
}

/// A Watch stream and which watcher (its position in `watchers`) each of
/// its watch ids is.
struct Open {
    stream: Stream,
    ids: HashMap<i64, usize>,
}

impl Watching {
    /// Opens a stream and creates every watch on it, each from its
    /// watcher's `next` (from now the first time, noted from the reply).
    async fn create(&mut self) -> Result<Open, EngineError> {
        let authority = &self.authority.clone();
        let mut creates = self.watchers.iter().map(|w| {
            frame(&WatchRequest {
                create_request: Some(WatchCreateRequest {
                    start_revision: w.next,
                    ..self.range.clone()
                }),
                progress_request: None,
            })
        });
        let first = creates.next().expect("a stream has a watcher");
        let mut stream = self
            .conn
            .stream(&self.conn.uri(WATCH), first)
            .await
            .map_err(|f| watch_error(authority, &f))?;
        for create in creates {
            stream
                .send(create)
                .map_err(|f| watch_error(authority, &f))?;
        }
        let mut open = Open {
            stream,
            ids: HashMap::new(),
        };
        // etcd answers the creates in order, but a resumed watch may send
        // events before a later watch's `created`: they are handled as they come.
        while open.ids.len() < self.watchers.len() {
            let reply = next_reply(&mut open.stream, authority)
                .await?
                .ok_or_else(|| {
                    EngineError(format!(
                        "etcd at {authority} ended the Watch stream before every watch was created"
                    ))
                })?;
            let arrived = Instant::now();
            if reply.created && reply.canceled {
                return Err(EngineError(format!(
                    "etcd at {authority} refused a watch: {}",
                    reply.cancel_reason
                )));
            }
            if reply.created {
                let position = open.ids.len();
                let watcher = &mut self.watchers[position];
                if watcher.next == 0 {
                    watcher.next = reply.header.map_or(0, |h| h.revision) + 1;
                }
                open.ids.insert(reply.watch_id, position);
            } else {
                self.handle(&mut open, reply, arrived);
            }
        }
        Ok(open)
    }

    /// Hands every event to the log until `stop`, opening the stream again
    /// whenever it ends while a watcher is left.
    async fn run(mut self, mut open: Open, stop: CancellationToken) {
        loop {
            self.read(&mut open, &stop).await;
            open.stream.cancel();
            if stop.is_cancelled() || self.watchers.is_empty() {
                break;
            }
            match self.reopen(&stop).await {
                Some(again) => open = again,
                None => break,
            }
        }
    }

    /// A stream with every watch created again, tried until `stop`.
    async fn reopen(&mut self, stop: &CancellationToken) -> Option<Open> {
        loop {
            unless_stopped(stop, tokio::time::sleep(RETRY)).await?;
            let limit = self.timeout;
            if let Ok(Ok(open)) =
                unless_stopped(stop, tokio::time::timeout(limit, self.create())).await?
            {
                return Some(open);
            }
        }
    }

    /// Reads `open` until it ends or `stop`; a watch etcd cancels leaves.
    async fn read(&mut self, open: &mut Open, stop: &CancellationToken) {
        loop {
            let Some(next) = unless_stopped(stop, open.stream.next()).await else {
                return;
            };
            let Ok(Some(message)) = next else {
                return; // the stream ended: reopened by `run`
            };
            let arrived = Instant::now();
            if let Ok(reply) = WatchResponse::decode(message) {
                self.handle(open, reply, arrived);
            }
        }
    }

    /// One reply's events into the log; a watch etcd cancelled leaves.
    fn handle(&mut self, open: &mut Open, reply: WatchResponse, arrived: Instant) {
        let Some(&at) = open.ids.get(&reply.watch_id) else {
            return;
        };
        if reply.canceled {
            self.leave(open, at);
            return;
        }
        let watcher = &mut self.watchers[at];
        let mut first = true;
        for kv in reply.events.into_iter().filter_map(|e| e.kv) {
            let key = key_number(&kv.key).unwrap_or(u64::MAX);
            if first && splits(watcher.ended, kv.mod_revision, key) {
                self.log.split(watcher.index);
            }
            first = false;
            self.log
                .event(watcher.index, key, Some(kv.mod_revision), arrived);
            watcher.next = watcher.next.max(kv.mod_revision + 1);
            watcher.ended = Some((kv.mod_revision, key));
        }
    }

    /// The watcher at `at` stops watching; the others' positions follow.
    fn leave(&mut self, open: &mut Open, at: usize) {
        self.watchers.remove(at);
        open.ids.retain(|_, position| *position != at);
        for position in open.ids.values_mut() {
            if *position > at {
                *position -= 1;
            }
        }
    }
}

/// How long a watcher whose stream ended waits before opening it again
/// (and between tries while no member answers).
const RETRY: Duration = Duration::from_millis(100);

/// The next WatchResponse on `stream`; None once it ended.
async fn next_reply(
    stream: &mut Stream,
    authority: &str,
) -> Result<Option<WatchResponse>, EngineError> {
    let Some(message) = stream
        .next()
        .await
        .map_err(|f| watch_error(authority, &f))?
    else {
        return Ok(None);
    };
    WatchResponse::decode(message).map(Some).map_err(|e| {
        EngineError(format!(
            "etcd at {authority}: a WatchResponse that does not decode: {e}"
        ))
    })
}

/// Whether a reply whose first event is `key` at `revision` split a
/// revision: the reply before ended with another key of that revision (the
/// same key again is a duplicate, counted as one).
fn splits(ended: Option<(i64, u64)>, revision: i64, key: u64) -> bool {
    ended.is_some_and(|(last, last_key)| last == revision && last_key != key)
}

fn watch_error(authority: &str, failure: &Failure) -> EngineError {
    EngineError(format!(
        "etcd at {authority}: Watch failed: {}",
        describe(failure)
    ))
}

/// gRPC calls a server it cannot reach UNAVAILABLE, and so do etcd's own
/// tools: a call that got no reply is named the same way here.
fn failure_outcome(failure: &Failure) -> Outcome {
    match failure {
        Failure::Transport(_) => Outcome::Named("UNAVAILABLE"),
        Failure::Status(code, _) => Outcome::Named(code.name()),
    }
}

/// A failure for a message: its outcome name and its cause (the server's
/// own message, if it sent one).
fn describe(failure: &Failure) -> String {
    let name = failure_outcome(failure).name();
    match failure {
        Failure::Transport(cause) => format!("{name}: {}", chain(cause.as_ref())),
        Failure::Status(_, message) if message.is_empty() => name.into_owned(),
        Failure::Status(_, message) => format!("{name}: {message}"),
    }
}

/// A connection to the first of `endpoints` that accepts (and, with auth,
/// authenticates).
async fn connect(
    plan: &Plan,
    options: &Options,
    endpoints: Vec<Endpoint>,
) -> Result<Conn, EngineError> {
    let target = endpoints[0].authority.clone();
    let what = || format!("cannot connect to etcd at {target}");
    let login = options.auth.as_ref().map(|credentials| {
        Arc::new(Authenticate {
            credentials: credentials.clone(),
            timeout: plan.timeout,
        }) as Arc<dyn Login>
    });
    within(plan.timeout, what, async {
        Conn::open(endpoints, dial_bound(plan.timeout), login)
            .await
            .map_err(|e| EngineError(format!("{}: {}", what(), chain(e.as_ref()))))
    })
    .await
}

/// etcd's login: Auth.Authenticate as the plan's user, each call bounded
/// by the plan's timeout; the token goes in the `token` metadata.
struct Authenticate {
    credentials: Arc<Credentials>,
    timeout: Duration,
}

impl Login for Authenticate {
    fn log_in<'a>(
        &'a self,
        calls: &'a Caller,
    ) -> Pin<Box<dyn Future<Output = Result<Credential, BoxError>> + Send + 'a>> {
        Box::pin(async move {
            let Credentials { user, password } = &*self.credentials;
            let request = frame(&AuthenticateRequest {
                name: user.clone(),
                password: password.expose().clone(),
            });
            let decode = |reply: &[u8]| AuthenticateResponse::decode(reply).ok();
            let reply =
                tokio::time::timeout(self.timeout, calls.unary(AUTHENTICATE, request, decode))
                    .await
                    .map_err(|_| {
                        format!(
                            "etcd did not answer Authenticate as {user:?} within {:.3} s",
                            self.timeout.as_secs_f64()
                        )
                    })?
                    .map_err(|failure| {
                        format!(
                            "etcd refused to authenticate {user:?}: {}",
                            describe(&failure)
                        )
                    })?;
            let token = HeaderValue::from_str(&reply.token)
                .map_err(|_| "etcd's Authenticate answered a token no header can carry")?;
            Ok(Credential::new(TOKEN, token))
        })
    }

    fn expired(&self, failure: &Failure) -> bool {
        token_refused(failure)
    }
}

/// Whether etcd refused a call for its token, so that clientv3 would get a
/// new one and retry: UNAUTHENTICATED ("invalid auth token": expired or
/// unknown to this member), or INVALID_ARGUMENT for a token older than the
/// last change of users or roles, or none at all (auth turned on since).
/// A wrong password or a denied permission is no such refusal.
fn token_refused(failure: &Failure) -> bool {
    const STALE: [&str; 3] = [
        "etcdserver: invalid auth token",
        "etcdserver: revision of auth store is old",
        "etcdserver: user name is empty",
    ];
    match failure {
        Failure::Status(code, _) if *code == Code::UNAUTHENTICATED => true,
        Failure::Status(code, message) if *code == Code::INVALID_ARGUMENT => {
            STALE.contains(&&**message)
        }
        _ => false,
    }
}

/// A TCP connection (even an HTTP/2 one) proves little: one harmless call
/// (counting keys under a prefix nothing uses; serializable, so it needs no
/// leader) shows an etcd answers on it before the step counts on it.
async fn probe(plan: &Plan, target: &Endpoint, conn: &Conn) -> Result<(), EngineError> {
    let what = || format!("etcd at {} did not answer a probe", target.authority);
    within(plan.timeout, what, async {
        let request = frame(&RangeRequest {
            key: Bytes::from_static(b"\0dbtester-probe"),
            serializable: true,
            count_only: true,
        });
        match conn.unary(&conn.uri(RANGE), request, |_| Some(())).await {
            Ok(()) => Ok(()),
            // Any status the server itself sent (UNIMPLEMENTED from a stand-in
            // that serves only Put, an auth error) proves a gRPC server is there.
            Err(Failure::Status(..)) => Ok(()),
            Err(failure) => Err(EngineError(format!("{}: {}", what(), describe(&failure)))),
        }
    })
    .await
}

/// The endpoint whose member is the leader: Maintenance.Status on each,
/// the one reporting itself (`leader == header.member_id`).
async fn leader(plan: &Plan, options: &Options) -> Result<Endpoint, EngineError> {
    let mut notes = Vec::new();
    for endpoint in &plan.endpoints {
        match status(plan, options, endpoint).await {
            Ok(reply) => {
                let me = reply.header.map(|h| h.member_id).unwrap_or(0);
                if reply.leader != 0 && reply.leader == me {
                    return Ok(endpoint.clone());
                }
                notes.push(format!("{} is a follower", endpoint.authority));
            }
            Err(error) => notes.push(error.0),
        }
    }
    Err(EngineError(format!(
        "no etcd leader among {} ({})",
        plan.endpoints
            .iter()
            .map(|e| e.authority.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        notes.join("; ")
    )))
}

async fn status(
    plan: &Plan,
    options: &Options,
    endpoint: &Endpoint,
) -> Result<StatusResponse, EngineError> {
    let conn = connect(plan, options, vec![endpoint.clone()]).await?;
    let what = || format!("etcd at {}: Maintenance.Status", endpoint.authority);
    within(plan.timeout, what, async {
        let request = frame(&StatusRequest {});
        let decode = |reply: &[u8]| StatusResponse::decode(reply).ok();
        conn.unary(&conn.uri(STATUS), request, decode)
            .await
            .map_err(|failure| {
                EngineError(format!("{}: {}", what(), failure_outcome(&failure).name()))
            })
    })
    .await
}

/// A reply that is not well-formed protobuf, or not shaped as expected.
#[derive(Debug, PartialEq, Eq)]
struct Malformed;

/// What a field holds, as far as reading a reply needs to know.
#[derive(Debug, PartialEq, Eq)]
enum Wire<'a> {
    /// Length-delimited: bytes, a string or a message.
    Bytes(&'a [u8]),
    /// A varint.
    Varint(u64),
    /// A fixed-size number or a (skipped) group.
    Other,
}

/// How deep groups may nest (prost's limit): a hostile reply cannot
/// exhaust the stack.
const MAX_DEPTH: u32 = 100;

/// The value of a RangeResponse's first key-value (None: no key-values),
/// read in place rather than decoded into owned structs. It checks what
/// decoding with prost into `{kvs: [{value}]}` checked: every field well
/// formed, kvs (2) and value (5) length-delimited, other fields skipped; the
/// last value in a key-value counts, a key-value without one has an empty value.
#[cfg(test)]
fn first_value(message: &[u8]) -> Result<Option<&[u8]>, Malformed> {
    first_kv(message).map(|kv| kv.map(|(value, _)| value))
}

/// The first key-value's value and mod_revision, read as `first_value` says.
fn first_kv(message: &[u8]) -> Result<Option<(&[u8], i64)>, Malformed> {
    let mut first = None;
    let mut rest = message;
    while !rest.is_empty() {
        match field(&mut rest, MAX_DEPTH)? {
            (2, Wire::Bytes(kv)) => {
                let read = key_value(kv)?;
                first.get_or_insert(read);
            }
            (2, Wire::Other | Wire::Varint(_)) => return Err(Malformed),
            _ => {}
        }
    }
    Ok(first)
}

/// A KeyValue's value (5) and mod_revision (3).
fn key_value(kv: &[u8]) -> Result<(&[u8], i64), Malformed> {
    let mut value: &[u8] = &[];
    let mut revision = 0;
    let mut rest = kv;
    while !rest.is_empty() {
        match field(&mut rest, MAX_DEPTH)? {
            (5, Wire::Bytes(bytes)) => value = bytes,
            (5, Wire::Other | Wire::Varint(_)) => return Err(Malformed),
            // An int64 on the wire: two's complement in 64 bits.
            (3, Wire::Varint(n)) => revision = n as i64,
            _ => {}
        }
    }
    Ok((value, revision))
}

/// Whether `message` is well-formed protobuf (what decoding a PutResponse
/// without fields checked).
fn well_formed(message: &[u8]) -> bool {
    let mut rest = message;
    while !rest.is_empty() {
        if field(&mut rest, MAX_DEPTH).is_err() {
            return false;
        }
    }
    true
}

/// Reads the field at the start of `rest` and moves past it: its number and
/// what it holds.
fn field<'a>(rest: &mut &'a [u8], depth: u32) -> Result<(u32, Wire<'a>), Malformed> {
    let (number, wire_type) = key(rest)?;
    let wire = match wire_type {
        0 => Wire::Varint(varint(rest)?),
        1 => {
            take(rest, 8)?;
            Wire::Other
        }
        2 => {
            let len = usize::try_from(varint(rest)?).map_err(|_| Malformed)?;
            Wire::Bytes(take(rest, len)?)
        }
        3 => {
            skip_group(rest, number, depth)?;
            Wire::Other
        }
        5 => {
            take(rest, 4)?;
            Wire::Other
        }
        // 4 ends a group none started; 6 and 7 are not wire types.
        _ => return Err(Malformed),
    };
    Ok((number, wire))
}

/// A field's key: its number (at least 1) and wire type.
fn key(rest: &mut &[u8]) -> Result<(u32, u32), Malformed> {
    let key = u32::try_from(varint(rest)?).map_err(|_| Malformed)?;
    match (key >> 3, key & 7) {
        (0, _) => Err(Malformed),
        field => Ok(field),
    }
}

/// Skips a group's fields, through its end (wire type 4, the same number).
fn skip_group(rest: &mut &[u8], number: u32, depth: u32) -> Result<(), Malformed> {
    let depth = depth.checked_sub(1).ok_or(Malformed)?;
    loop {
        let mut after = *rest;
        match key(&mut after)? {
            (end, 4) if end == number => {
                *rest = after;
                return Ok(());
            }
            (_, 4) => return Err(Malformed),
            _ => {
                field(rest, depth)?;
            }
        }
    }
}

/// A base-128 varint of at most 10 bytes that fits 64 bits.
fn varint(rest: &mut &[u8]) -> Result<u64, Malformed> {
    let mut value = 0u64;
    for (i, &byte) in rest.iter().take(10).enumerate() {
        if i == 9 && byte > 1 {
            return Err(Malformed); // past 64 bits
        }
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            *rest = &rest[i + 1..];
            return Ok(value);
        }
    }
    Err(Malformed)
}

/// The next `len` bytes, moving past them.
fn take<'a>(rest: &mut &'a [u8], len: usize) -> Result<&'a [u8], Malformed> {
    if rest.len() < len {
        return Err(Malformed);
    }
    let (taken, after) = rest.split_at(len);
    *rest = after;
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the engine decoded replies into before it read them in place:
    /// the reference `first_value` and `well_formed` must agree with.
    #[derive(Clone, PartialEq, prost::Message)]
    struct RangeResponse {
        #[prost(message, repeated, tag = "2")]
        kvs: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct KeyValue {
        #[prost(bytes = "bytes", tag = "5")]
        value: Bytes,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct PutResponse {}

    /// RangeResponse{header{member_id 9}, kvs[{key "k", value "v"}], count 1}.
    const REPLY: &[u8] = b"\x0a\x02\x10\x09\x12\x06\x0a\x01k\x2a\x01v\x20\x01";

    #[test]
    fn messages_use_etcds_field_numbers() {
        let put = PutRequest {
            key: Bytes::from_static(b"k1"),
            value: Bytes::from_static(b"vv"),
        };
        assert_eq!(put.encode_to_vec(), b"\x0a\x02k1\x12\x02vv");
        let range = RangeRequest {
            key: Bytes::from_static(b"k"),
            serializable: true,
            count_only: true,
        };
        assert_eq!(range.encode_to_vec(), b"\x0a\x01k\x38\x01\x48\x01");
        // Unknown fields are skipped, kvs[0].value is read.
        assert_eq!(first_value(REPLY), Ok(Some(&b"v"[..])));
        // compare{MOD EQUAL k 5}, success{put k=v}, failure{range k}
        let txn = update_txn(Bytes::from_static(b"k"), Bytes::from_static(b"v"), 5);
        assert_eq!(
            txn.encode_to_vec(),
            b"\x0a\x07\x10\x02\x1a\x01k\x30\x05\x12\x08\x12\x06\x0a\x01k\x12\x01v\x1a\x05\x0a\x03\x0a\x01k"
        );
        let status = StatusResponse::decode(&b"\x0a\x02\x10\x07\x20\x07"[..]).unwrap();
        assert_eq!((status.header.unwrap().member_id, status.leader), (7, 7));
    }

    #[test]
    fn reads_check_the_first_value() {
        let value = b"v";
        assert_eq!(holds(REPLY, value), Some(true));
        assert_eq!(holds(REPLY, b"w"), Some(false));
        // No key-values at all (the key is missing): wrong-value, as before.
        assert_eq!(holds(b"\x0a\x02\x10\x09\x20\x00", value), Some(false));
        assert_eq!(holds(b"", value), Some(false));
        // A key-value without a value has an empty one.
        assert_eq!(holds(b"\x12\x03\x0a\x01k", value), Some(false));
        assert_eq!(holds(b"\x12\x03\x0a\x01k", b""), Some(true));
        // Only the first key-value counts; within it, the last value.
        assert_eq!(
            holds(b"\x12\x03\x2a\x01w\x12\x03\x2a\x01v", value),
            Some(false)
        );
        assert_eq!(holds(b"\x12\x06\x2a\x01w\x2a\x01v", value), Some(true));
        // Not protobuf: the reply is INTERNAL (see grpc::messages).
        assert_eq!(holds(&REPLY[..REPLY.len() - 3], value), None);
        assert_eq!(range_outcome(Ok(true)), Outcome::Ok);
        assert_eq!(range_outcome(Ok(false)), Outcome::WrongValue);
        assert_eq!(
            range_outcome(Err(Failure::Status(Code::INTERNAL, "".into()))),
            Outcome::Named("INTERNAL")
        );
    }

    /// Replies, and every truncation and many corruptions of them: reading in
    /// place accepts, rejects and reads exactly what prost's decoding did.
    #[test]
    fn replies_read_as_prost_decoded_them() {
        let kv = |value: &[u8]| {
            let mut kv = b"\x0a\x04k001\x10\xb2\x06\x18\x03\x20\x01\x2a".to_vec();
            kv.push(value.len() as u8);
            kv.extend_from_slice(value);
            kv.extend_from_slice(b"\x30\x00");
            kv
        };
        let reply = |kvs: &[Vec<u8>]| {
            let mut reply = b"\x0a\x0a\x08\x01\x10\x02\x18\x91\x03\x20\x05".to_vec();
            for kv in kvs {
                reply.push(0x12);
                reply.push(kv.len() as u8);
                reply.extend_from_slice(kv);
            }
            reply.extend_from_slice(b"\x18\x00\x20\x02");
            reply
        };
        let mut corpus = vec![
            REPLY.to_vec(),
            reply(&[]),
            reply(&[kv(b"value")]),
            reply(&[kv(b"one"), kv(b"two")]),
            // A group (3 .. 4) and fixed-size fields among unknown fields.
            b"\x1b\x08\x01\x1c\x29\0\0\0\0\0\0\0\0\x35\0\0\0\0\x12\x02\x2a\x00".to_vec(),
        ];
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for seed in corpus.clone() {
            for cut in 0..seed.len() {
                corpus.push(seed[..cut].to_vec());
            }
            for _ in 0..2000 {
                let mut bad = seed.clone();
                for _ in 0..1 + next() % 3 {
                    let at = (next() % bad.len() as u64) as usize;
                    bad[at] = next() as u8;
                }
                corpus.push(bad);
            }
        }
        for message in &corpus {
            let prost = RangeResponse::decode(&message[..])
                .map(|r| r.kvs.first().map(|kv| kv.value.to_vec()));
            let ours = first_value(message).map(|v| v.map(<[u8]>::to_vec));
            assert_eq!(ours.ok(), prost.ok(), "{message:x?}");
            assert_eq!(
                well_formed(message),
                PutResponse::decode(&message[..]).is_ok(),
                "{message:x?}"
            );
        }
    }

    #[test]
    fn failures_keep_grpc_names() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let lost = Failure::Transport(Box::new(refused));
        // A server the client cannot reach is UNAVAILABLE, as gRPC names it.
        assert_eq!(failure_outcome(&lost), Outcome::Named("UNAVAILABLE"));
        assert_eq!(describe(&lost), "UNAVAILABLE: connection refused");
        let quota = Failure::Status(Code::parse(b"8"), "".into());
        assert_eq!(failure_outcome(&quota).name(), "RESOURCE_EXHAUSTED");
        assert_eq!(describe(&quota), "RESOURCE_EXHAUSTED");
    }

    #[test]
    fn a_refused_token_is_told_from_a_refused_user() {
        let status =
            |code: &[u8], message: &str| Failure::Status(Code::parse(code), message.into());
        for refused in [
            status(b"16", "etcdserver: invalid auth token"),
            status(b"16", ""),
            status(b"3", "etcdserver: invalid auth token"),
            status(b"3", "etcdserver: revision of auth store is old"),
            status(b"3", "etcdserver: user name is empty"),
        ] {
            assert!(token_refused(&refused), "{refused:?}");
        }
        let wrong = "etcdserver: authentication failed, invalid user ID or password";
        for other in [
            status(b"3", wrong),
            status(b"7", "etcdserver: permission denied"),
            status(b"14", ""),
        ] {
            assert!(!token_refused(&other), "{other:?}");
        }
        assert_eq!(
            describe(&status(b"3", wrong)),
            format!("INVALID_ARGUMENT: {wrong}")
        );
    }

    #[test]
    fn authenticate_uses_etcds_field_numbers_and_hides_secrets() {
        let request = AuthenticateRequest {
            name: "root".into(),
            password: "hunter2".into(),
        };
        assert_eq!(request.encode_to_vec(), b"\x0a\x04root\x12\x07hunter2");
        assert_eq!(
            format!("{request:?}"),
            r#"AuthenticateRequest { name: "root", .. }"#
        );
        let reply = AuthenticateResponse::decode(&b"\x0a\x02\x10\x07\x12\x05tok.1"[..]).unwrap();
        assert_eq!(reply.token, "tok.1");
        assert!(!format!("{reply:?}").contains("tok"));
    }

    #[test]
    fn a_revision_in_two_replies_is_split_and_a_key_again_is_not() {
        assert!(splits(Some((7, 1)), 7, 2));
        assert!(!splits(Some((7, 1)), 7, 1)); // a duplicate
        assert!(!splits(Some((7, 1)), 8, 2));
        assert!(!splits(None, 7, 2));
    }
}
