//! ZooKeeper through the zookeeper-client crate: one session (its own TCP
//! connection) per connection, given every server; keys are znodes under
//! /dbtester. A read is getData, an insert create, an update setData, and a
//! read-modify-write getData then a setData on the version read (a lost
//! race, BadVersion: `conflict`).
//!
//! With the plan's `tls` every session speaks TLS (ZooKeeper's secure
//! client port; the crate's own rustls client, built from the plan's PEM),
//! and with its `auth` each session adds digest auth as it connects (again
//! on every reconnect: the crate replays it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::{join_all, try_join_all};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{
    Acls, AddWatchMode, Client, CreateMode, CreateOptions, Error, EventType, PersistentWatcher,
    SessionInfo, SessionState, Stat, TlsOptions, WatchedEvent,
};

use crate::outcome::{EngineError, Outcome};
use crate::plan::{Consistency, Endpoint, Plan, PlanError, Secret, Step, TlsPlan, authorities};
use crate::protocols::{Given, Held, Protocol, Request, within};
use crate::transport;
use crate::transport::failover::ordered;
use crate::workload::OpKind;
use crate::workload::distribution::SAME;
use crate::workload::watch::{WatchLog, key_number, unless_stopped};

mod lock;

#[derive(Clone)]
pub struct Options {
    pub session_timeout: Duration,
    /// TLS to every server, as the crate takes it; None: plain TCP.
    pub tls: Option<TlsOptions>,
    /// "user:password" for digest auth; None: no auth.
    pub digest: Option<Secret<Vec<u8>>>,
    /// Dropping the client leaves its session to expire instead of ending
    /// it (a locker's, so that it can crash as a client process does).
    pub detached: bool,
    /// The session to take up again instead of a new one.
    pub resume: Option<SessionInfo>,
}

/// Shows whether there is TLS and auth, not what they hold.
impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("session_timeout", &self.session_timeout)
            .field("tls", &self.tls.is_some())
            .field("digest", &self.digest.is_some())
            .finish()
    }
}

const ROOT: &str = "/dbtester";
/// How long closing waits for the server to end each session (short: a stop()
/// must finish within a second even when the server has stopped answering).
const CLOSE_WAIT: Duration = Duration::from_millis(250);

fn create_options() -> CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

pub struct ZooKeeper {
    clients: Vec<Client>,
    /// A lock load's: where each locker opens a session of its own.
    lockers: Option<Lockers>,
    /// An update of a missing key creates it (every client writing one
    /// key: the first write finds none).
    create_missing: bool,
    /// Reads sync first (linearizable consistency).
    sync_reads: bool,
}

/// What opening a locker's session takes: the servers, the time allowed,
/// and the options (the lock load's TTL as the session timeout, detached).
struct Lockers {
    endpoints: Vec<Endpoint>,
    timeout: Duration,
    options: Options,
}

impl ZooKeeper {
    /// getData of `path`; with linearizable consistency, after a sync. A
    /// session's server may not have applied a write another session had
    /// acknowledged (ZooKeeper's reads are sequentially consistent: served
    /// by the session's own server); a sync first brings it up to the
    /// leader's state as of the sync. The two go out together: the server
    /// answers a session's requests in order and holds the read until its
    /// sync is done, so this costs no extra round trip from the client.
    async fn read(&self, client: &Client, path: &str) -> Result<(Vec<u8>, Stat), Error> {
        let synced = self.sync_reads.then(|| client.sync(path));
        let read = client.get_data(path);
        if let Some(synced) = synced {
            synced.await?;
        }
        read.await
    }
}

impl Protocol for ZooKeeper {
    const NAME: &'static str = "zookeeper";
    const OPTION_KEYS: &'static [&'static str] = &["session_timeout_ms"];
    const AUTH_KEYS: &'static [&'static str] = &["user", "password"];
    type Options = Options;
    const LOCKS: bool = true;
    /// A session (and its connection) of the locker's own.
    type Session = lock::LockSession;

    fn options(given: &Given<'_>) -> Result<Options, PlanError> {
        let ms = given
            .options
            .int("session_timeout_ms", 1, i64::from(u32::MAX))?;
        let digest = match &given.auth {
            None => None,
            Some(auth) => {
                let user = auth.string("user", "a ZooKeeper digest user's name")?;
                if user.contains(':') {
                    return Err(PlanError(format!(
                        "{} must not hold a \":\" (digest auth sends \"user:password\")",
                        auth.name("user")
                    )));
                }
                let password = auth.secret("password", "the user's password")?;
                Some(Secret::new(format!("{user}:{password}").into_bytes()))
            }
        };
        Ok(Options {
            session_timeout: Duration::from_millis(ms as u64),
            tls: given.tls.map(tls_options).transpose()?,
            digest,
            detached: false,
            resume: None,
        })
    }

    async fn open(plan: &Plan, options: Options, step: &Step) -> Result<Self, EngineError> {
        // Each locker opens a session of its own (`open_session`), whose
        // timeout is the lock load's TTL; the step's one connection is for
        // the root.
        let lockers = plan.locks.as_ref().map(|locks| Lockers {
            endpoints: plan.endpoints.clone(),
            timeout: plan.timeout,
            options: Options {
                session_timeout: Duration::from_secs(locks.ttl_s.unsigned_abs()),
                detached: true,
                ..options.clone()
            },
        });
        let connections = if lockers.is_some() {
            1
        } else {
            step.connections
        };
        let clients = try_join_all((0..connections).map(|c| session(plan, &options, c))).await?;
        create_root(plan, &clients[0]).await?;
        Ok(ZooKeeper {
            clients,
            lockers,
            create_missing: plan.keys.choose == SAME,
            sync_reads: plan.consistency == Consistency::Linearizable,
        })
    }

    async fn open_session(&self, conn: usize, _ttl_s: i64) -> Result<Self::Session, Outcome> {
        let Some(l) = &self.lockers else {
            return Err(Outcome::Named("unsupported"));
        };
        let client = session_on(&l.endpoints, l.timeout, &l.options, conn)
            .await
            .map_err(|_| Outcome::Named("ConnectionLoss"))?;
        Ok(lock::LockSession::new(client))
    }

    async fn acquire(
        &self,
        _: usize,
        session: &Self::Session,
        name: &[u8],
    ) -> Result<Held, Outcome> {
        lock::acquire(session, name).await
    }

    async fn release(&self, _: usize, session: &Self::Session, held: &Held) -> Result<(), Outcome> {
        lock::release(session, held).await
    }

    async fn withdraw(&self, _: usize, session: &Self::Session, _: &[u8]) {
        lock::withdraw(session).await;
    }

    async fn close_session(&self, _: usize, session: Self::Session) {
        if let Some(l) = &self.lockers {
            lock::close(session, l).await;
        }
    }

    async fn abandon_session(&self, _: usize, session: Self::Session) {
        // Detached: its connection closes without ending the session.
        drop(session);
    }

    /// Each watch connection is a session of its own carrying its share of
    /// the watchers, each a persistent recursive watch (`addWatch`, 3.6 and
    /// newer) of the keys' parent, as several watchers of one client share
    /// its session. Events before 3.9 carry no zxid: each is matched to its
    /// write by its path, and order is judged by the zxids of the creates.
    async fn watch(
        plan: &Plan,
        options: Options,
        log: Arc<WatchLog>,
        stop: CancellationToken,
    ) -> Result<JoinSet<()>, EngineError> {
        let watch = plan.watch.expect("watchers are planned");
        let clients =
            try_join_all((0..watch.connections).map(|c| session(plan, &options, c))).await?;
        // The parent exists before the watches, so its own creation is no
        // event: each session's server syncs with the leader first, or one
        // that has not applied the creation yet would report it.
        create_root(plan, &clients[0]).await?;
        for client in &clients {
            let what = || format!("ZooKeeper did not sync {ROOT} before the watches");
            within(plan.timeout, what, async {
                client
                    .sync(ROOT)
                    .await
                    .map_err(|e| EngineError(format!("{}: {e}", what())))
            })
            .await?;
        }
        let mut tasks = JoinSet::new();
        for watcher in 0..watch.watchers {
            let client = clients[watcher % watch.connections].clone();
            let what = || format!("ZooKeeper did not add watcher {watcher}'s watch on {ROOT}");
            let watching = within(plan.timeout, what, async {
                client
                    .watch(ROOT, AddWatchMode::PersistentRecursive)
                    .await
                    .map_err(|e| EngineError(format!("{}: {e}", what())))
            })
            .await?;
            tasks.spawn(read_events(
                client,
                watching,
                watcher,
                log.clone(),
                stop.clone(),
            ));
        }
        Ok(tasks)
    }

    async fn request(&self, conn: usize, request: &Request<'_>, _sent: &mut Instant) -> Outcome {
        let client = &self.clients[conn % self.clients.len()];
        let path = znode(request.key);
        let value = &request.value[..];
        match request.kind {
            OpKind::Read => match self.read(client, &path).await {
                Ok((data, _)) if request.accepts(&data) => Outcome::Ok,
                Ok(_) => Outcome::WrongValue,
                Err(e) => outcome(&e),
            },
            OpKind::Insert => match client.create(&path, value, &create_options()).await {
                Ok((stat, _)) => {
                    request.wrote(stat.czxid);
                    Outcome::Ok
                }
                Err(e) => outcome(&e),
            },
            OpKind::Update => {
                let create = self.create_missing || request.create_missing;
                update(client, &path, value, create).await
            }
            OpKind::ReadModifyWrite => {
                let version = match self.read(client, &path).await {
                    Ok((data, stat)) if request.accepts(&data) => stat.version,
                    Ok(_) => return Outcome::WrongValue,
                    Err(e) => return outcome(&e),
                };
                match client.set_data(&path, value, Some(version)).await {
                    Ok(_) => Outcome::Ok,
                    Err(Error::BadVersion) => Outcome::Conflict,
                    Err(e) => outcome(&e),
                }
            }
        }
    }

    /// A read is served by whichever server the session is on, and may be
    /// stale (ZooKeeper promises sequential consistency, not more): with
    /// linearizable consistency, a checked read first syncs that server
    /// with the leader, as ZooKeeper's documentation says to.
    async fn read_value(&self, conn: usize, key: &[u8]) -> Result<Option<Bytes>, Outcome> {
        let client = &self.clients[conn % self.clients.len()];
        let path = znode(key);
        match self.read(client, &path).await {
            Ok((data, _)) => Ok(Some(Bytes::from(data))),
            Err(Error::NoNode) => Ok(None),
            Err(e) => Err(outcome(&e)),
        }
    }

    async fn close(self) {
        end_sessions(self.clients).await;
    }
}

/// Drops `clients`: the last handle of each makes its session send
/// CloseSession; waits (briefly) for that so sessions do not linger on the
/// server.
async fn end_sessions(clients: Vec<Client>) {
    let watchers: Vec<_> = clients.iter().map(Client::state_watcher).collect();
    drop(clients);
    join_all(watchers.into_iter().map(|mut watcher| async move {
        let closed = async {
            while !watcher.state().is_terminated() {
                watcher.changed().await;
            }
        };
        let _ = tokio::time::timeout(CLOSE_WAIT, closed).await;
    }))
    .await;
}

/// The znode of `key` (keys are ASCII: "k" and digits, or a checked key).
fn znode(key: &[u8]) -> String {
    let mut path = String::with_capacity(ROOT.len() + 1 + key.len());
    path.push_str(ROOT);
    path.push('/');
    path.push_str(std::str::from_utf8(key).unwrap_or_default());
    path
}

/// Overwrites `path`; with `create_missing`, creates it when it is missing.
async fn update(client: &Client, path: &str, value: &[u8], create_missing: bool) -> Outcome {
    match client.set_data(path, value, None).await {
        Ok(_) => return Outcome::Ok,
        Err(Error::NoNode) if create_missing => {}
        Err(e) => return outcome(&e),
    }
    // A key several clients write: overwrite it, creating it the first
    // time. Two clients may both find it missing; the one whose create
    // loses then overwrites what the other created.
    match client.create(path, value, &create_options()).await {
        Ok(_) => Outcome::Ok,
        Err(Error::NodeExists) => match client.set_data(path, value, None).await {
            Ok(_) => Outcome::Ok,
            Err(e) => outcome(&e),
        },
        Err(e) => outcome(&e),
    }
}

/// Session `c` of a step or of the watchers: given every server, its own
/// first, so the session moves to another when its server goes away, as a
/// real client's does. The crate shuffles the list (as ZooKeeper's Java
/// client does) before it connects and again before each reconnect: the
/// order given cannot pin a session to its own server, so sessions land on
/// servers at random, and one that moved does not come back. While a
/// session moves, the requests it had in flight fail with ConnectionLoss;
/// new ones wait in the crate's queue and go out once it is connected again
/// (or time out).
async fn session(plan: &Plan, options: &Options, c: usize) -> Result<Client, EngineError> {
    session_on(&plan.endpoints, plan.timeout, options, c).await
}

/// `session` with `endpoints`, within `timeout`.
async fn session_on(
    endpoints: &[Endpoint],
    timeout: Duration,
    options: &Options,
    c: usize,
) -> Result<Client, EngineError> {
    let order = ordered(endpoints, c % endpoints.len());
    let servers = authorities(&order);
    let listed = servers.clone();
    let what = move || format!("cannot establish a ZooKeeper session with {listed}");
    within(timeout, what.clone(), async move {
        let mut attempt = 1;
        loop {
            let failed = match connect(options, &servers).await {
                Ok(session) => return Ok(session),
                Err(e) => e,
            };
            // A refused certificate will be refused again: say why now.
            if let Some(why) = tls_refusal(&order).await {
                return Err(EngineError(format!("{}: {}", what(), why)));
            }
            if attempt == SESSION_ATTEMPTS {
                return Err(EngineError(format!("{}: {}", what(), failed)));
            }
            attempt += 1;
            tokio::time::sleep(SESSION_RETRY).await;
        }
    })
    .await
}

/// Tries at a session before its step fails. The crate tries each server
/// once (`with_fail_eagerly`), and on a loaded host a TLS session's only
/// try once failed ("no available hosts") while the server took its three
/// neighbours' (a clean-clone test run); another try is cheap.
const SESSION_ATTEMPTS: u32 = 3;
const SESSION_RETRY: Duration = Duration::from_millis(200);

/// One try at a session with `servers`, each server tried once: none
/// accepting fails now instead of cycling through them until the timeout.
async fn connect(options: &Options, servers: &str) -> Result<Client, Error> {
    let mut connector = Client::connector()
        .with_session_timeout(options.session_timeout)
        .with_fail_eagerly();
    if options.detached {
        connector = connector.with_detached();
    }
    if let Some(info) = &options.resume {
        connector = connector.with_session(info.clone());
    }
    if let Some(digest) = &options.digest {
        connector = connector.with_auth("digest", digest.expose());
    }
    match &options.tls {
        // Every server over TLS (a server without a scheme is tcp+tls).
        Some(tls) => {
            connector
                .with_tls(tls.clone())
                .secure_connect(servers)
                .await
        }
        None => connector.connect(servers).await,
    }
}

/// How long a server that took the handshake has to refuse our certificate.
const TLS_SETTLE: Duration = Duration::from_secs(1);

/// Why the first of `servers` refused TLS, if it did (its certificate, or
/// ours): the crate says only that no server accepted.
async fn tls_refusal(servers: &[Endpoint]) -> Option<String> {
    let first = servers.first()?;
    let tls = first.tls.as_ref()?;
    match transport::tls::check(tls, &first.host, first.port, TLS_SETTLE).await {
        Ok(()) => None,
        Err(e) => Some(format!("TLS with {} failed: {}", first.authority, e)),
    }
}

/// The plan's `tls` as the crate takes it: its own rustls client, built
/// from the same PEM. It checks each server's certificate against that
/// server's own host and offers no other name to check.
fn tls_options(tls: &TlsPlan) -> Result<TlsOptions, PlanError> {
    if tls.server_name().is_some() {
        return Err(PlanError(
            "plan[\"tls\"][\"server_name\"] must be None for zookeeper: its client checks \
             each server's certificate against that server's own host"
                .into(),
        ));
    }
    // The plan checked the PEM already; the crate's reading of it differs
    // little, and its errors are not shown (they may quote a line of it).
    let refused = |what: &str| {
        PlanError(format!(
            "plan[\"tls\"][\"{what}\"] cannot be read by the ZooKeeper client"
        ))
    };
    let options = TlsOptions::new()
        .with_pem_ca(tls.ca_pem())
        .map_err(|_| refused("ca"))?;
    match tls.identity_pem() {
        None => Ok(options),
        Some((cert, key)) => options
            .with_pem_identity(cert, key)
            .map_err(|_| refused("key")),
    }
}

/// The keys' parent, created unless it is there.
async fn create_root(plan: &Plan, client: &Client) -> Result<(), EngineError> {
    let what = || format!("cannot create {ROOT}");
    within(plan.timeout, what, async {
        match client.create(ROOT, &[], &create_options()).await {
            Ok(_) | Err(Error::NodeExists) => Ok(()),
            Err(e) => Err(EngineError(format!("{}: {}", what(), e))),
        }
    })
    .await
}

/// Hands the watcher's events to the log until `stop`, or until its session
/// ends (what it did not deliver then counts as missed). After its session
/// reconnects, the watch is added again: the library's own restoring of it
/// (SetWatches2) was measured to deliver nothing more from ZooKeeper 3.8.0
/// after the leader was killed. Events that fired while it was away are
/// lost (ZOOKEEPER-4698) and count as missed.
async fn read_events(
    client: Client,
    mut watching: PersistentWatcher,
    watcher: usize,
    log: Arc<WatchLog>,
    stop: CancellationToken,
) {
    let mut away = false;
    loop {
        let Some(event) = unless_stopped(&stop, watching.changed()).await else {
            break;
        };
        let arrived = Instant::now();
        if event.event_type != EventType::Session {
            if event.path == ROOT {
                // The parent itself, not a key: a server that had not yet
                // applied its creation when the watch was added reports it.
                continue;
            }
            let name = event.path.rsplit('/').next().unwrap_or_default();
            let key = key_number(name.as_bytes()).unwrap_or(u64::MAX);
            let revision = (event.zxid != WatchedEvent::NO_ZXID).then_some(event.zxid);
            log.event(watcher, key, revision, arrived);
            continue;
        }
        match event.session_state {
            // the library panics on a wait after a terminal state
            state if state.is_terminated() => break,
            SessionState::Disconnected => away = true,
            SessionState::SyncConnected if away => {
                away = false;
                match rewatch(&client, &stop).await {
                    // the old one goes; the server keeps the path's watch
                    Some(again) => watching = again,
                    None => break,
                }
            }
            _ => {}
        }
    }
    drop(watching);
    drop(client);
}

/// The watch added again, tried until it is or `stop` (None).
async fn rewatch(client: &Client, stop: &CancellationToken) -> Option<PersistentWatcher> {
    loop {
        let added = client.watch(ROOT, AddWatchMode::PersistentRecursive);
        if let Ok(watching) = unless_stopped(stop, added).await? {
            return Some(watching);
        }
        unless_stopped(stop, tokio::time::sleep(REWATCH_RETRY)).await?;
    }
}

/// The pause between tries to add a watch again.
const REWATCH_RETRY: Duration = Duration::from_millis(100);

/// ZooKeeper's own error names, short and stable.
fn outcome(error: &Error) -> Outcome {
    Outcome::Named(match error {
        Error::NoNode => "NoNode",
        Error::NodeExists => "NodeExists",
        Error::ConnectionLoss => "ConnectionLoss",
        Error::SessionExpired => "SessionExpired",
        Error::SessionMoved => "SessionMoved",
        Error::ClientClosed => "ClientClosed",
        Error::Timeout => "Timeout",
        Error::NoHosts => "NoHosts",
        Error::NoAuth => "NoAuth",
        Error::AuthFailed => "AuthFailed",
        Error::BadVersion => "BadVersion",
        Error::NoChildrenForEphemerals => "NoChildrenForEphemerals",
        Error::NotEmpty => "NotEmpty",
        Error::InvalidAcl => "InvalidAcl",
        Error::NotReadOnly => "NotReadOnly",
        Error::NoWatcher => "NoWatcher",
        Error::QuotaExceeded => "QuotaExceeded",
        Error::Throttled => "Throttled",
        Error::MarshallingError => "MarshallingError",
        Error::Unimplemented => "Unimplemented",
        Error::ReconfigDisabled => "ReconfigDisabled",
        Error::RuntimeInconsistent => "RuntimeInconsistent",
        Error::BadArguments(_) => "BadArguments",
        Error::UnmarshalError { .. } => "UnmarshalError",
        Error::UnexpectedError(_) => "UnexpectedError",
        Error::UnexpectedErrorCode(_) => "UnexpectedErrorCode",
        Error::Custom(_) => return Outcome::from_transport(error),
        _ => "ZooKeeperError",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names() {
        assert_eq!(outcome(&Error::NodeExists).name(), "NodeExists");
        assert_eq!(
            outcome(&Error::UnexpectedErrorCode(-42)).name(),
            "UnexpectedErrorCode"
        );
        assert_eq!(outcome(&Error::ConnectionLoss).name(), "ConnectionLoss");
    }
}
