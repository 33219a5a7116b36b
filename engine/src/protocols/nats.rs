//! NATS JetStream's key-value store (KV) through the async-nats crate: one
//! client (its own TCP connection) per connection, given every server, its
//! own first. A KV bucket is a stream (`KV_<bucket>`) whose subject
//! `$KV.<bucket>.<key>` holds a key's writes; its last message there is the
//! key's value, and that message's stream sequence the key's revision. A
//! key's first character is a subject token of its own (`k.000012`), so
//! that the load's keys are one subject filter (`k.>`) apart from the
//! checked clients' and the pre-filled ones.
//!
//! A read gets the last message on the key's subject: with linearizable
//! consistency from the stream's leader (JetStream's MSG.GET API), with
//! serializable consistency by a direct get, which any replica answers,
//! possibly from behind the leader. A missing key, or one whose last
//! message is a delete or purge marker, is `key-not-found`. An update or
//! insert is a put, which the stream acknowledges with its sequence: the
//! write's revision. A read-modify-write reads through the leader, then
//! puts on the condition that the key's last sequence is still the one read
//! (an update); a lost race, JetStream's "wrong last sequence", is
//! `conflict`.
//!
//! The bucket is made before the load (dbtester's Python side makes it and
//! allows direct gets on it); opening only looks it up. No TLS or auth yet.
//!
//! A client whose server goes away redials the servers in the plan's order
//! (its own first), none the cluster advertises; it does not move back to
//! its own once it is on another. While it is away its requests wait in the
//! crate's queue, and those still unanswered at the timeout are `timeout`.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::connection::State;
use async_nats::jetstream::context::{
    ContextBuilder, GetStreamError, GetStreamErrorKind, PublishError, PublishErrorKind,
    RequestError as ApiRequestError, RequestErrorKind as ApiRequestErrorKind,
};
use async_nats::jetstream::kv::{Operation, PutError, PutErrorKind, Store, UpdateError};
use async_nats::jetstream::kv::{UpdateErrorKind, Watch};
use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::{
    DirectGetError, DirectGetErrorKind, LastRawMessageError, LastRawMessageErrorKind,
};
use async_nats::jetstream::{self, ErrorCode};
use async_nats::{Client, ConnectOptions, HeaderMap, ServerAddr, StatusCode};
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::{join_all, try_join_all};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::outcome::{EngineError, Outcome, chain};
use crate::plan::{Consistency, Endpoint, Plan, PlanError, Step, authorities};
use crate::protocols::{Given, Protocol, Request, within};
use crate::transport::failover::{dial_bound, ordered};
use crate::workload::OpKind;
use crate::workload::watch::{WatchLog, key_number, unless_stopped};

/// How long a watcher waits before asking for its watch again.
const WATCH_RETRY: Duration = Duration::from_millis(200);
/// How long connecting asks for the bucket at least, while JetStream settles.
const LOOKUP_WINDOW: Duration = Duration::from_secs(30);
/// How long one ask for the bucket waits.
const LOOKUP_ASK: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The KV bucket the load reads and writes.
    pub bucket: String,
}

/// A read that found no value: no message on the key's subject, or a
/// delete or purge marker (what a KV client calls "key not found").
const KEY_NOT_FOUND: Outcome = Outcome::Named("key-not-found");
/// Nobody answered a request (NATS status 503): the stream has no leader
/// (an election), or none of its replicas serves direct gets.
const NO_RESPONDERS: Outcome = Outcome::Named("no-responders");

/// A KV operation's header, and its values for a deleted key.
const KV_OPERATION: &str = "KV-Operation";
const DELETED: [&str; 2] = ["DEL", "PURGE"];
/// The header of the markers the server itself writes where a message was
/// removed (a per-message TTL, a purge): the key has no value.
const MARKER_REASON: &str = "Nats-Marker-Reason";

/// How often a client pings its server when nothing else comes from it;
/// the crate drops a connection after the third unanswered ping, so a
/// server that stopped answering (paused, or cut off) is left in about
/// three of these rather than three of the crate's default minute.
const PING_INTERVAL: Duration = Duration::from_secs(1);
/// After every server failed a dial: the first pause before the next and
/// the longest, as the engine's own connections back off (failover.rs).
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long closing gives each client to drain (short: a stop must end
/// within a second even when the servers have stopped answering).
const CLOSE_WAIT: Duration = Duration::from_millis(250);
/// The pause after a watcher's failure before it goes on, so a watcher
/// whose server is down does not spin.
const RETRY: Duration = Duration::from_millis(100);

/// One connection: its client, and the bucket seen through it (whose
/// `stream`, `KV_<bucket>`, serves the leader's and the direct gets).
struct Conn {
    client: Client,
    kv: Store,
}

pub struct Nats {
    conns: Vec<Conn>,
    endpoints: Vec<Endpoint>,
    /// Reads go to the stream's leader (linearizable), else to any replica.
    leader_reads: bool,
}

/// The last message on a key's subject, as a KV read sees it.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// The key's value, and its revision.
    Value(Bytes, u64),
    /// No value: the revision of its delete or purge marker, or 0 when the
    /// subject has no message (what a create must expect either way).
    Missing(u64),
}

impl Protocol for Nats {
    const NAME: &'static str = "nats";
    const OPTION_KEYS: &'static [&'static str] = &["bucket"];
    const AUTH_KEYS: &'static [&'static str] = &[];
    type Options = Options;
    type Session = ();

    fn options(given: &Given<'_>) -> Result<Options, PlanError> {
        let refused = match (&given.auth, given.tls) {
            (Some(_), _) => Some("auth"),
            (None, Some(_)) => Some("tls"),
            (None, None) => None,
        };
        if let Some(key) = refused {
            return Err(PlanError(format!(
                "plan[\"{key}\"] must be None for nats: NATS in dbtester has no TLS or \
                 auth yet"
            )));
        }
        let allowed = "a KV bucket's name: letters, digits, \"-\" and \"_\"";
        let bucket = given.options.string("bucket", allowed)?;
        if !bucket_name(&bucket) {
            return Err(PlanError(format!(
                "{} must be {allowed}, got {bucket:?}",
                given.options.name("bucket")
            )));
        }
        Ok(Options { bucket })
    }

    async fn open(plan: &Plan, options: Options, step: &Step) -> Result<Self, EngineError> {
        let conns = try_join_all((0..step.connections).map(|c| connect(plan, &options, c))).await?;
        let leader_reads = plan.consistency == Consistency::Linearizable;
        // A bucket without direct gets answers none: every serializable read
        // would fail as `no-responders`.
        if !leader_reads && !conns[0].kv.stream.cached_info().config.allow_direct {
            return Err(EngineError(format!(
                "the KV bucket {:?} on nats at {} does not allow direct gets, which \
                 serializable reads use",
                options.bucket,
                authorities(&plan.endpoints)
            )));
        }
        Ok(Nats {
            conns,
            endpoints: plan.endpoints.clone(),
            leader_reads,
        })
    }

    /// The watchers share `plan.watch.connections` clients, each watcher a
    /// watch of the load's keys (`k.>`: an ordered push consumer of the
    /// stream on their subjects, delivering only what is written after it
    /// is made), so the checked clients' keys never reach it. The
    /// crate makes that consumer again after a lost connection or missed
    /// heartbeats, from the sequence after the last it delivered, so a
    /// watcher resumes where it was; if its watch ends all the same, it
    /// watches again from there. Each event is timed at its arrival and
    /// carries its write's revision (the message's stream sequence).
    async fn watch(
        plan: &Plan,
        options: Options,
        log: Arc<WatchLog>,
        stop: CancellationToken,
    ) -> Result<JoinSet<()>, EngineError> {
        let watch = plan.watch.expect("watchers are planned");
        let conns =
            try_join_all((0..watch.connections).map(|c| connect(plan, &options, c))).await?;
        let mut tasks = JoinSet::new();
        for watcher in 0..watch.watchers {
            let started = Instant::now();
            let kv = conns[watcher % watch.connections].kv.clone();
            let what = || format!("nats did not start watcher {watcher}'s watch");
            // A consumer's creation can time out while JetStream settles
            // on a fresh bucket (seen in CI): asked again for half the
            // request timeout, then the last failure is said (the rest of
            // the timeout bounds that last try).
            let watching = within(plan.timeout, what, async {
                loop {
                    match kv.watch(LOAD_KEYS).await {
                        Ok(watching) => return Ok(watching),
                        Err(_) if started.elapsed() < plan.timeout / 2 => {
                            tokio::time::sleep(WATCH_RETRY).await;
                        }
                        Err(e) => return Err(EngineError(format!("{}: {}", what(), chain(&e)))),
                    }
                }
            })
            .await?;
            let watcher = Watcher {
                kv,
                index: watcher,
                log: log.clone(),
                next: 0,
            };
            tasks.spawn(watcher.run(watching, stop.clone()));
        }
        Ok(tasks)
    }

    async fn request(&self, conn: usize, request: &Request<'_>, _sent: &mut Instant) -> Outcome {
        let conn = &self.conns[conn];
        let key = &kv_key(request.key);
        match request.kind {
            OpKind::Read => match read(&conn.kv, key, self.leader_reads).await {
                Ok(Found::Value(value, _)) if request.accepts(&value) => Outcome::Ok,
                Ok(Found::Value(..)) => Outcome::WrongValue,
                Ok(Found::Missing(_)) => KEY_NOT_FOUND,
                Err(outcome) => outcome,
            },
            OpKind::Update | OpKind::Insert => {
                written(request, conn.kv.put(key, request.value.clone()).await)
            }
            OpKind::ReadModifyWrite => {
                // The read goes to the leader whatever the consistency: its
                // revision is the update's condition, which a lagging
                // replica's older one would fail for certain.
                let revision = match read(&conn.kv, key, true).await {
                    Ok(Found::Value(value, revision)) if request.accepts(&value) => revision,
                    Ok(Found::Value(..)) => return Outcome::WrongValue,
                    // Created on the revision found missing, as the crate's
                    // `create` does (without the second read it makes).
                    Ok(Found::Missing(revision)) if request.create_missing => revision,
                    Ok(Found::Missing(_)) => return KEY_NOT_FOUND,
                    Err(outcome) => return outcome,
                };
                let update = conn.kv.update(key, request.value.clone(), revision);
                written(request, update.await)
            }
        }
    }

    /// Through the stream's leader, whatever the plan's consistency: the
    /// linearizability check needs every read to see the latest write.
    async fn read_value(&self, conn: usize, key: &[u8]) -> Result<Option<Bytes>, Outcome> {
        match read(&self.conns[conn].kv, &kv_key(key), true).await? {
            Found::Value(value, _) => Ok(Some(value)),
            Found::Missing(_) => Ok(None),
        }
    }

    /// The server the client is connected to now, by the address that
    /// server announced (its INFO); None while it is not connected.
    async fn endpoint(&self, conn: usize) -> Option<Endpoint> {
        let client = &self.conns[conn].client;
        if client.connection_state() != State::Connected {
            return None;
        }
        let info = client.try_server_info()?;
        member(&self.endpoints, &info.host, info.port)
    }

    async fn close(self) {
        // A drain ends each client's subscriptions and then its connection;
        // dropping the last handles ends a client that could not take it in
        // time (one whose servers stopped answering).
        join_all(
            self.conns
                .iter()
                .map(|conn| tokio::time::timeout(CLOSE_WAIT, conn.client.drain())),
        )
        .await;
        drop(self.conns);
    }
}

/// Connection `c` of a step or of the watchers, given every server with its
/// own first, its JetStream requests bounded by the plan's timeout, and the
/// bucket looked up through it.
async fn connect(plan: &Plan, options: &Options, c: usize) -> Result<Conn, EngineError> {
    let endpoints = ordered(&plan.endpoints, c % plan.endpoints.len());
    let listed = authorities(&endpoints);
    let what = || format!("cannot connect to nats at {listed}");
    let servers = endpoints
        .iter()
        .map(|e| {
            format!("nats://{}", e.authority)
                .parse::<ServerAddr>()
                .map_err(|e| EngineError(format!("{}: {e}", what())))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let count = servers.len();
    let client = within(plan.timeout, what, async {
        ConnectOptions::new()
            // The plan's order (the crate shuffles by default) and only its
            // servers: those the cluster advertises may be addresses this
            // host cannot reach.
            .retain_servers_order()
            .ignore_discovered_servers()
            .connection_timeout(dial_bound(plan.timeout))
            .request_timeout(Some(plan.timeout))
            .ping_interval(PING_INTERVAL)
            .reconnect_delay_callback(move |attempt| reconnect_delay(attempt, count))
            .connect(servers)
            .await
            .map_err(|e| EngineError(format!("{}: {}", what(), chain(&e))))
    })
    .await?;
    let jetstream = ContextBuilder::new()
        .timeout(plan.timeout)
        // A put the engine gave up on (at its timeout) holds one of the
        // context's permits for unanswered acks until this passes (30 s by
        // default), and a client has 5,000 of them.
        .ack_timeout(plan.timeout)
        .build(client.clone());
    let kv = bucket(&jetstream, &options.bucket, &listed, plan.timeout).await?;
    Ok(Conn { client, kv })
}

/// The bucket, asked for again while JetStream settles: just after the
/// bucket is made its stream elects a leader, and a lookup sent meanwhile
/// may go unanswered (seen in CI: no answer within 10 s). Each ask waits
/// at most LOOKUP_ASK; asking goes on for `timeout` or LOOKUP_WINDOW,
/// whichever is longer. A bucket that is not there fails at once.
async fn bucket(
    jetstream: &jetstream::Context,
    name: &str,
    listed: &str,
    timeout: Duration,
) -> Result<Store, EngineError> {
    let deadline = Instant::now() + timeout.max(LOOKUP_WINDOW);
    let ask = timeout.min(LOOKUP_ASK);
    loop {
        let failed = match tokio::time::timeout(ask, jetstream.get_key_value(name)).await {
            Ok(Ok(kv)) => return Ok(kv),
            Ok(Err(e)) if missing(&e) => return Err(EngineError(bucket_error(name, listed, &e))),
            Ok(Err(e)) => bucket_error(name, listed, &e),
            Err(_) => format!(
                "cannot look up the KV bucket {name:?} on nats at {listed}: no answer within \
                 {:.3} s",
                ask.as_secs_f64()
            ),
        };
        if Instant::now() >= deadline {
            return Err(EngineError(failed));
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// The lookup's error says the bucket's stream is not there.
fn missing(error: &(dyn StdError + 'static)) -> bool {
    error
        .source()
        .and_then(|e| e.downcast_ref::<GetStreamError>())
        .is_some_and(|e| {
            matches!(e.kind(), GetStreamErrorKind::JetStream(api)
                if api.error_code() == ErrorCode::STREAM_NOT_FOUND)
        })
}

/// Why the bucket could not be looked up, naming it and the servers.
fn bucket_error(bucket: &str, servers: &str, error: &(dyn StdError + 'static)) -> String {
    if missing(error) {
        format!(
            "nats at {servers} has no KV bucket {bucket:?} (stream KV_{bucket}; dbtester \
             makes it before the load)"
        )
    } else {
        format!(
            "cannot look up the KV bucket {bucket:?} on nats at {servers}: {}",
            chain(error)
        )
    }
}

/// The pause before a client's `attempt`th dial in a row (the crate counts
/// them from 1 over the servers in order, and again from 1 once one
/// accepts): none while it goes down the list of `servers` the first time,
/// then FIRST_BACKOFF doubling to MAX_BACKOFF.
fn reconnect_delay(attempt: usize, servers: usize) -> Duration {
    match attempt.checked_sub(servers + 1) {
        None => Duration::ZERO,
        Some(after) => FIRST_BACKOFF
            .saturating_mul(1 << after.min(16))
            .min(MAX_BACKOFF),
    }
}

/// Whether `name` is a KV bucket's name (as NATS's clients check it).
fn bucket_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The KV key of a request's key, which is ASCII ("k" and digits, or a
/// checked client's "c" and digits): its first character a subject token
/// of its own (`k000012` is `k.000012`), so that the load's keys, the
/// checked clients' and the pre-filled ones are apart by subject, which is
/// how dbtester's Python side counts them and the watchers filter them.
fn kv_key(key: &[u8]) -> String {
    let key = std::str::from_utf8(key).unwrap_or_default();
    match key.char_indices().nth(1) {
        Some((second, _)) => format!("{}.{}", &key[..second], &key[second..]),
        None => key.to_owned(),
    }
}

/// The request's key that `kv_key` stored as `stored` (its token's dot out).
fn request_key(stored: &str) -> String {
    stored.replacen('.', "", 1)
}

/// The subjects of the load's keys (under the bucket), which watchers watch.
const LOAD_KEYS: &str = "k.>";

/// The subject whose last message is `key`'s value.
fn subject(kv: &Store, key: &str) -> String {
    let mut subject = String::with_capacity(kv.prefix.len() + key.len());
    subject.push_str(&kv.prefix);
    subject.push_str(key);
    subject
}

/// The last message on `key`'s subject: from the stream's leader, or
/// (`leader` false) from whichever replica takes the direct get.
async fn read(kv: &Store, key: &str, leader: bool) -> Result<Found, Outcome> {
    let subject = subject(kv, key);
    let got = if leader {
        kv.stream
            .get_last_raw_message_by_subject(&subject)
            .await
            .map_err(|e| outcome(&e))
    } else {
        kv.stream
            .direct_get_last_for_subject(subject)
            .await
            .map_err(|e| outcome(&e))
    };
    match got {
        Ok(message) => Ok(found(message)),
        // No message on the subject (`told` says which answers mean that).
        Err(failed) if failed == KEY_NOT_FOUND => Ok(Found::Missing(0)),
        Err(failed) => Err(failed),
    }
}

fn found(message: StreamMessage) -> Found {
    if deleted(&message.headers) {
        Found::Missing(message.sequence)
    } else {
        Found::Value(message.payload, message.sequence)
    }
}

/// Whether a message with `headers` marks its key deleted or purged.
fn deleted(headers: &HeaderMap) -> bool {
    let operation = headers.get(KV_OPERATION).map(|v| v.as_str());
    operation.is_some_and(|op| DELETED.contains(&op)) || headers.get(MARKER_REASON).is_some()
}

/// A put's or update's outcome; a write that took effect reports its
/// revision (for the watchers' order).
fn written<E: StdError + 'static>(request: &Request<'_>, reply: Result<u64, E>) -> Outcome {
    match reply {
        Ok(revision) => {
            request.wrote(i64::try_from(revision).unwrap_or(i64::MAX));
            Outcome::Ok
        }
        Err(e) => outcome(&e),
    }
}

/// A failure's outcome: the first error in its chain that tells what
/// happened (the crate wraps the server's answer in errors of its own).
/// JetStream's errors keep the server's name for them (`api_error`); one
/// that tells nothing known is `nats-error`.
fn outcome(error: &(dyn StdError + 'static)) -> Outcome {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(outcome) = told(e) {
            return outcome;
        }
        cause = e.source();
    }
    Outcome::Named("nats-error")
}

/// What `e` alone tells; None: its cause may.
fn told(e: &(dyn StdError + 'static)) -> Option<Outcome> {
    if let Some(api) = e.downcast_ref::<jetstream::Error>() {
        return Some(api_error(api));
    }
    if let Some(e) = e.downcast_ref::<PublishError>() {
        return match e.kind() {
            PublishErrorKind::TimedOut => Some(Outcome::Timeout),
            PublishErrorKind::WrongLastSequence => Some(Outcome::Conflict),
            // The crate's name for a publish no stream took (status 503).
            PublishErrorKind::StreamNotFound => Some(NO_RESPONDERS),
            // The client dropped the request before its answer came.
            PublishErrorKind::BrokenPipe => Some(Outcome::ConnectionReset),
            PublishErrorKind::MaxAckPending => Some(Outcome::Named("max-ack-pending")),
            PublishErrorKind::MaxPayloadExceeded => Some(Outcome::Named("max-payload-exceeded")),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<UpdateError>() {
        return match e.kind() {
            UpdateErrorKind::TimedOut => Some(Outcome::Timeout),
            UpdateErrorKind::WrongLastRevision => Some(Outcome::Conflict),
            UpdateErrorKind::InvalidKey => Some(Outcome::Named("invalid-key")),
            UpdateErrorKind::Other => None,
        };
    }
    if let Some(e) = e.downcast_ref::<PutError>() {
        return (e.kind() == PutErrorKind::InvalidKey).then_some(Outcome::Named("invalid-key"));
    }
    if let Some(e) = e.downcast_ref::<LastRawMessageError>() {
        return match e.kind() {
            LastRawMessageErrorKind::NoMessageFound => Some(KEY_NOT_FOUND),
            LastRawMessageErrorKind::InvalidSubject => Some(Outcome::Named("invalid-key")),
            LastRawMessageErrorKind::JetStream(api) => Some(api_error(&api)),
            LastRawMessageErrorKind::Other => None,
        };
    }
    if let Some(e) = e.downcast_ref::<DirectGetError>() {
        return match e.kind() {
            DirectGetErrorKind::NotFound => Some(KEY_NOT_FOUND),
            // The crate's reading of status 408 from a direct get.
            DirectGetErrorKind::InvalidSubject => Some(Outcome::Named("invalid-key")),
            DirectGetErrorKind::TimedOut => Some(Outcome::Timeout),
            DirectGetErrorKind::ErrorResponse(status, _) => Some(status_outcome(status)),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<ApiRequestError>() {
        return match e.kind() {
            ApiRequestErrorKind::TimedOut => Some(Outcome::Timeout),
            ApiRequestErrorKind::NoResponders => Some(NO_RESPONDERS),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<async_nats::RequestError>() {
        return match e.kind() {
            async_nats::RequestErrorKind::TimedOut => Some(Outcome::Timeout),
            async_nats::RequestErrorKind::NoResponders => Some(NO_RESPONDERS),
            _ => None,
        };
    }
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        return Some(Outcome::from_io(io));
    }
    if e.is::<serde_json::Error>() {
        return Some(Outcome::Named("bad-reply"));
    }
    None
}

/// A status the server answered a direct get with.
fn status_outcome(status: StatusCode) -> Outcome {
    match status {
        StatusCode::NO_RESPONDERS => NO_RESPONDERS,
        StatusCode::NOT_FOUND => KEY_NOT_FOUND,
        StatusCode::TIMEOUT => Outcome::Timeout,
        _ => Outcome::Named("direct-get-failed"),
    }
}

/// A JetStream API error by the server's own name for its code (its
/// constant in nats-server's errors.json without "JS" and "Err", in kebab
/// case, one shortened); a lost race of a conditional write is `conflict`,
/// a get of a subject without messages a missing key.
fn api_error(error: &jetstream::Error) -> Outcome {
    Outcome::Named(match error.error_code() {
        ErrorCode::STREAM_WRONG_LAST_SEQUENCE | ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT => {
            return Outcome::Conflict;
        }
        ErrorCode::NO_MESSAGE_FOUND => return KEY_NOT_FOUND,
        ErrorCode::CLUSTER_NOT_AVAILABLE => "cluster-not-avail",
        ErrorCode::CLUSTER_NOT_LEADER => "cluster-not-leader",
        ErrorCode::STREAM_NOT_FOUND => "stream-not-found",
        ErrorCode::STREAM_OFFLINE | ErrorCode::STREAM_OFFLINE_REASON => "stream-offline",
        ErrorCode::STREAM_STORE_FAILED => "stream-store-failed",
        // "expected last sequence per subject temporarily unavailable": a
        // new leader that has not caught up enough to check the condition.
        ErrorCode::STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY => "expected-last-seq-not-ready",
        ErrorCode::INSUFFICIENT_RESOURCES => "insufficient-resources",
        ErrorCode::ACCOUNT_RESOURCES_EXCEEDED => "account-resources-exceeded",
        ErrorCode::STORAGE_RESOURCES_EXCEEDED => "storage-resources-exceeded",
        ErrorCode::MEMORY_RESOURCES_EXCEEDED => "memory-resources-exceeded",
        ErrorCode::STREAM_LIMITS => "stream-limits",
        ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM => "stream-message-exceeds-maximum",
        ErrorCode::STREAM_SEALED => "stream-sealed",
        ErrorCode::BAD_REQUEST => "bad-request",
        ErrorCode::JETSTREAM_NOT_ENABLED => "not-enabled",
        ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT => "not-enabled-for-account",
        _ => "jetstream-error",
    })
}

/// The plan's endpoint of a server that announced `host` and `port`: the
/// one with both, else the only one with its port (a server listening on
/// every address announces none of them).
fn member(endpoints: &[Endpoint], host: &str, port: u16) -> Option<Endpoint> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Some(exact) = endpoints.iter().find(|e| e.port == port && e.host == host) {
        return Some(exact.clone());
    }
    let mut on_port = endpoints.iter().filter(|e| e.port == port);
    match (on_port.next(), on_port.next()) {
        (Some(only), None) => Some(only.clone()),
        _ => None,
    }
}

/// One watcher's watch.
struct Watcher {
    kv: Store,
    index: usize,
    log: Arc<WatchLog>,
    /// The revision after the last it received (0: none yet).
    next: u64,
}

impl Watcher {
    /// Hands its events to the log until `stop`.
    async fn run(mut self, mut watching: Watch, stop: CancellationToken) {
        loop {
            let Some(next) = unless_stopped(&stop, watching.next()).await else {
                break;
            };
            let arrived = Instant::now();
            match next {
                Some(Ok(entry)) => {
                    self.next = entry.revision + 1;
                    // A delete or purge is no write of the load's.
                    if entry.operation == Operation::Put {
                        let key = request_key(&entry.key);
                        let key = key_number(key.as_bytes()).unwrap_or(u64::MAX);
                        let revision = i64::try_from(entry.revision).unwrap_or(i64::MAX);
                        self.log.event(self.index, key, Some(revision), arrived);
                    }
                }
                // The crate goes on making its consumer again.
                Some(Err(_)) => {
                    if unless_stopped(&stop, tokio::time::sleep(RETRY))
                        .await
                        .is_none()
                    {
                        break;
                    }
                }
                None => match self.again(&stop).await {
                    Some(again) => watching = again,
                    None => break,
                },
            }
        }
    }

    /// The watch made anew from the revision after the last one received
    /// (from now if none was), tried until it is or `stop` (None).
    async fn again(&self, stop: &CancellationToken) -> Option<Watch> {
        loop {
            unless_stopped(stop, tokio::time::sleep(RETRY)).await?;
            let watch = async {
                if self.next == 0 {
                    self.kv.watch(LOAD_KEYS).await
                } else {
                    self.kv.watch_from_revision(LOAD_KEYS, self.next).await
                }
            };
            if let Ok(watching) = unless_stopped(stop, watch).await? {
                return Some(watching);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Secret;
    use crate::plan::tests::{dict, good_plan, s};
    use crate::plan::{Value, parse_endpoint};

    fn plan_with(options: Value) -> Plan {
        let mut plan = good_plan();
        plan.protocol = Nats::NAME.into();
        plan.options = options;
        plan
    }

    fn options(plan: &Plan) -> Result<Options, String> {
        crate::protocols::options::<Nats>(plan).map_err(|e| e.0)
    }

    #[test]
    fn the_bucket_is_the_one_option() {
        let plan = plan_with(dict(&[("bucket", s("dbtester"))]));
        assert_eq!(
            options(&plan),
            Ok(Options {
                bucket: "dbtester".into()
            })
        );
        let missing = options(&plan_with(dict(&[]))).unwrap_err();
        assert!(missing.contains("is missing \"bucket\""), "{missing}");
        let not_text = options(&plan_with(dict(&[("bucket", Value::Int(3))]))).unwrap_err();
        assert!(
            not_text.contains("[\"bucket\"] must be a KV bucket's name"),
            "{not_text}"
        );
        for bad in ["", "a.b", "a b", "a*", "a>", "kv/1"] {
            let error = options(&plan_with(dict(&[("bucket", s(bad))]))).unwrap_err();
            assert!(error.contains(&format!("got {bad:?}")), "{error}");
        }
        assert!(options(&plan_with(dict(&[("bucket", s("KV_a-1"))]))).is_ok());
        let unknown = dict(&[("bucket", s("b")), ("replicas", Value::Int(3))]);
        let error = options(&plan_with(unknown)).unwrap_err();
        assert!(
            error.contains("allowed keys for nats: \"bucket\""),
            "{error}"
        );
    }

    #[test]
    fn auth_and_tls_are_refused() {
        let mut plan = plan_with(dict(&[("bucket", s("dbtester"))]));
        plan.auth = Some(Secret::new(dict(&[])));
        let error = options(&plan).unwrap_err();
        assert!(
            error.starts_with("plan[\"auth\"] must be None for nats"),
            "{error}"
        );
        assert!(error.contains("no TLS or auth yet"), "{error}");
        // Any key in it is unknown to nats before that.
        plan.auth = Some(Secret::new(dict(&[("token", s("t"))])));
        assert!(options(&plan).unwrap_err().contains("nats takes none"));

        use crate::plan::pki::{Pki, plan as tls_plan};
        let pki = Pki::new();
        let address = "127.0.0.1:4222".parse().unwrap();
        let mut plan = tls_plan(address, pki.plan(&pki.ca, false));
        plan.protocol = Nats::NAME.into();
        plan.options = dict(&[("bucket", s("dbtester"))]);
        let error = options(&plan).unwrap_err();
        assert!(
            error.starts_with("plan[\"tls\"] must be None for nats"),
            "{error}"
        );
    }

    #[test]
    fn nats_is_selected_by_name() {
        struct Named;
        impl crate::protocols::Select for (Named, &Plan) {
            type Output = &'static str;
            fn plan(&self) -> &Plan {
                self.1
            }
            fn select<P: Protocol>(self, _: P::Options) -> &'static str {
                P::NAME
            }
        }
        let plan = plan_with(dict(&[("bucket", s("dbtester"))]));
        assert_eq!(crate::protocols::select((Named, &plan)), Ok("nats"));
        let mut other = good_plan();
        other.protocol = "natz".into();
        let error = crate::protocols::select((Named, &other)).unwrap_err().0;
        assert!(error.contains("\"consul\", \"nats\""), "{error}");
    }

    #[test]
    fn keys_are_the_subjects_last_token() {
        assert_eq!(kv_key(b"k000000000012"), "k.000000000012");
        assert_eq!(kv_key(b"c3"), "c.3");
        assert_eq!(kv_key(b"\xff"), "");
        assert_eq!(request_key("k.000000000012"), "k000000000012");
        assert!(bucket_name("dbtester"));
        assert!(!bucket_name("db.tester"));
    }

    #[test]
    fn markers_are_missing_keys() {
        let mut headers = HeaderMap::new();
        assert!(!deleted(&headers));
        headers.insert(KV_OPERATION, "PUT");
        assert!(!deleted(&headers));
        for marker in DELETED {
            headers.insert(KV_OPERATION, marker);
            assert!(deleted(&headers), "{marker}");
        }
        let mut removed = HeaderMap::new();
        removed.insert(MARKER_REASON, "MaxAge");
        assert!(deleted(&removed));
    }

    #[test]
    fn dials_go_down_the_list_then_back_off() {
        let delays: Vec<u128> = (1..=12)
            .map(|attempt| reconnect_delay(attempt, 3).as_millis())
            .collect();
        assert_eq!(
            delays,
            [0, 0, 0, 50, 100, 200, 400, 800, 1000, 1000, 1000, 1000]
        );
        assert_eq!(reconnect_delay(usize::MAX, 3), MAX_BACKOFF);
        assert_eq!(reconnect_delay(1, 1), Duration::ZERO);
    }

    #[test]
    fn the_member_is_found_by_the_servers_address() {
        let endpoints: Vec<Endpoint> = ["127.0.0.1:4222", "127.0.0.1:4223", "10.0.0.3:4222"]
            .iter()
            .map(|e| parse_endpoint(e).unwrap())
            .collect();
        let at = |host: &str, port| member(&endpoints, host, port).map(|e| e.authority);
        assert_eq!(at("127.0.0.1", 4223).as_deref(), Some("127.0.0.1:4223"));
        assert_eq!(at("10.0.0.3", 4222).as_deref(), Some("10.0.0.3:4222"));
        // Listening on every address: only a port of its own tells.
        assert_eq!(at("0.0.0.0", 4223).as_deref(), Some("127.0.0.1:4223"));
        assert_eq!(at("0.0.0.0", 4222), None);
        assert_eq!(at("127.0.0.1", 9999), None);
        let v6 = [parse_endpoint("[::1]:4222").unwrap()];
        assert_eq!(
            member(&v6, "::1", 4222).map(|e| e.authority).as_deref(),
            Some("[::1]:4222")
        );
    }

    /// A JetStream API error as the server sends it.
    fn api(code: u64, status: usize) -> jetstream::Error {
        let json = format!(r#"{{"code":{status},"err_code":{code},"description":"d"}}"#);
        serde_json::from_str(&json).unwrap()
    }

    #[test]
    fn failures_are_named_by_what_the_server_said() {
        // A lost race of an update, in both the server's codes for it.
        let lost = PublishError::with_source(PublishErrorKind::WrongLastSequence, api(10071, 400));
        assert_eq!(outcome(&UpdateError::from(lost)), Outcome::Conflict);
        let busy = PublishError::with_source(PublishErrorKind::Other, api(10164, 400));
        assert_eq!(outcome(&UpdateError::from(busy)), Outcome::Conflict);
        // A put into a stream without a leader: nobody answers.
        let nobody = PublishError::new(PublishErrorKind::StreamNotFound);
        let put = PutError::with_source(PutErrorKind::Ack, nobody);
        assert_eq!(outcome(&put).name(), "no-responders");
        let late = PutError::with_source(
            PutErrorKind::Ack,
            PublishError::new(PublishErrorKind::TimedOut),
        );
        assert_eq!(outcome(&late), Outcome::Timeout);
        assert_eq!(
            outcome(&UpdateError::new(UpdateErrorKind::TimedOut)),
            Outcome::Timeout
        );
        // The leader's get, while the cluster elects one.
        let electing =
            LastRawMessageError::new(LastRawMessageErrorKind::JetStream(api(10008, 503)));
        assert_eq!(outcome(&electing).name(), "cluster-not-avail");
        let request = ApiRequestError::new(ApiRequestErrorKind::TimedOut);
        let timed_out = LastRawMessageError::with_source(LastRawMessageErrorKind::Other, request);
        assert_eq!(outcome(&timed_out), Outcome::Timeout);
        let request = ApiRequestError::new(ApiRequestErrorKind::NoResponders);
        let unanswered = LastRawMessageError::with_source(LastRawMessageErrorKind::Other, request);
        assert_eq!(outcome(&unanswered).name(), "no-responders");
        // Direct gets.
        let direct = |kind| outcome(&DirectGetError::new(kind)).name().into_owned();
        let status = |code: u16, text: &str| {
            DirectGetErrorKind::ErrorResponse(StatusCode::from_u16(code).unwrap(), text.into())
        };
        assert_eq!(direct(status(503, "no responders")), "no-responders");
        assert_eq!(direct(status(413, "too large")), "direct-get-failed");
        assert_eq!(direct(DirectGetErrorKind::TimedOut), "timeout");
        // Names for the rest; unknown codes and errors keep a name too.
        assert_eq!(api_error(&api(10077, 503)).name(), "stream-store-failed");
        assert_eq!(api_error(&api(10999, 500)).name(), "jetstream-error");
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let other = PublishError::with_source(PublishErrorKind::Other, reset);
        assert_eq!(outcome(&other), Outcome::ConnectionReset);
        let unknown = PublishError::new(PublishErrorKind::Other);
        assert_eq!(outcome(&unknown).name(), "nats-error");
        let garbled = serde_json::from_str::<u8>("x").unwrap_err();
        let garbled = PublishError::with_source(PublishErrorKind::Other, garbled);
        assert_eq!(outcome(&garbled).name(), "bad-reply");
    }

    #[test]
    fn a_missing_bucket_is_named() {
        let missing = GetStreamError::new(GetStreamErrorKind::JetStream(api(10059, 404)));
        let error = async_nats::jetstream::context::KeyValueError::with_source(
            async_nats::jetstream::context::KeyValueErrorKind::GetBucket,
            missing,
        );
        let text = bucket_error("dbtester", "127.0.0.1:4222,127.0.0.1:4223", &error);
        assert_eq!(
            text,
            "nats at 127.0.0.1:4222,127.0.0.1:4223 has no KV bucket \"dbtester\" (stream \
             KV_dbtester; dbtester makes it before the load)"
        );
        let request = GetStreamError::new(GetStreamErrorKind::Request);
        let error = async_nats::jetstream::context::KeyValueError::with_source(
            async_nats::jetstream::context::KeyValueErrorKind::GetBucket,
            request,
        );
        let text = bucket_error("dbtester", "127.0.0.1:4222", &error);
        assert!(
            text.starts_with(
                "cannot look up the KV bucket \"dbtester\" on nats at 127.0.0.1:4222: "
            ),
            "{text}"
        );
    }

    /// The protocol's own calls; loads, watches and checked clients on a
    /// real cluster are tested end to end from Python (tests/e2e/test_nats.py,
    /// test_check.py). Against a live cluster whose bucket exists:
    /// `DBTESTER_NATS_ENDPOINTS=127.0.0.1:4222,127.0.0.1:4223 cargo test
    /// nats::tests::live -- --ignored --nocapture` (DBTESTER_NATS_BUCKET,
    /// default "dbtester").
    mod live {
        use super::*;
        use crate::plan::tests::good;
        use crate::workload::Workload;

        fn endpoints() -> Vec<String> {
            let listed = std::env::var("DBTESTER_NATS_ENDPOINTS")
                .expect("set DBTESTER_NATS_ENDPOINTS=host:port,host:port to run this test");
            listed.split(',').map(str::to_owned).collect()
        }

        fn bucket() -> String {
            std::env::var("DBTESTER_NATS_BUCKET").unwrap_or_else(|_| "dbtester".into())
        }

        /// The good plan on the cluster.
        fn plan() -> Plan {
            let mut entries = good();
            let endpoints = endpoints().iter().map(|e| s(e)).collect();
            let set = [
                ("protocol", s("nats")),
                ("endpoints", Value::List(endpoints)),
                ("options", dict(&[("bucket", s(&bucket()))])),
                ("key_size", Value::Int(13)),
                ("value_size", Value::Int(100)),
            ];
            for (key, value) in set {
                entries.retain(|(k, _)| *k != key);
                entries.push((key, value));
            }
            crate::plan::parse(&dict(&entries)).unwrap()
        }

        /// A step of `connections` connections, a client each.
        fn connections(connections: usize) -> Step {
            Step {
                clients: connections,
                connections,
                requests: 0,
                rate: 0.0,
            }
        }

        /// Closing while every server is paused (their pids in
        /// DBTESTER_NATS_PAUSE_PIDS, continued afterwards): at once after the
        /// pause, and once the clients have given their servers up.
        #[tokio::test]
        #[ignore = "needs a live NATS cluster: set DBTESTER_NATS_ENDPOINTS"]
        async fn live_close_while_paused() {
            let pids: Vec<i32> = std::env::var("DBTESTER_NATS_PAUSE_PIDS")
                .expect("set DBTESTER_NATS_PAUSE_PIDS=pid,pid")
                .split(',')
                .map(|p| p.parse().unwrap())
                .collect();
            let signal = |signal| {
                for pid in &pids {
                    // SAFETY: kill(2) on pids the caller named.
                    assert_eq!(unsafe { libc::kill(*pid, signal) }, 0);
                }
            };
            let plan = plan();
            let options = crate::protocols::options::<Nats>(&plan).unwrap();
            let step = connections(6);
            for wait in [Duration::ZERO, Duration::from_secs(5)] {
                let nats = Nats::open(&plan, options.clone(), &step).await.unwrap();
                signal(libc::SIGSTOP);
                tokio::time::sleep(wait).await;
                let closing = Instant::now();
                nats.close().await;
                let took = closing.elapsed();
                signal(libc::SIGCONT);
                println!("closed {wait:?} after the pause in {took:?}");
                assert!(took < Duration::from_secs(1), "{took:?}");
            }
        }

        /// The protocol's own calls: the outcomes of a missing key, a
        /// deleted one, a lost race, and where each connection is.
        #[tokio::test]
        #[ignore = "needs a live NATS cluster: set DBTESTER_NATS_ENDPOINTS"]
        async fn live_requests() {
            let plan = plan();
            let options = crate::protocols::options::<Nats>(&plan).unwrap();
            let step = connections(3);
            let nats = Nats::open(&plan, options.clone(), &step).await.unwrap();
            for conn in 0..3 {
                let at = nats.endpoint(conn).await.map(|e| e.authority);
                assert_eq!(at.as_deref(), Some(plan.endpoints[conn].authority.as_str()));
            }
            let workload = Workload::new(&plan).unwrap();
            let asked = format!("t{}", std::process::id());
            let key = kv_key(asked.as_bytes());
            let kv = &nats.conns[0].kv;
            kv.purge(&key).await.unwrap();
            let request = |kind| Request::new(kind, asked.as_bytes(), Bytes::new(), 0, &workload);
            let get = request(OpKind::Read);
            let missing = nats.request(1, &get, &mut Instant::now()).await;
            assert_eq!(missing.name(), "key-not-found");
            assert_eq!(nats.read_value(2, asked.as_bytes()).await, Ok(None));
            let rmw = request(OpKind::ReadModifyWrite);
            let lost = nats.request(1, &rmw, &mut Instant::now()).await;
            assert_eq!(lost.name(), "key-not-found");
            // A checked client's write creates it.
            let mut create = request(OpKind::ReadModifyWrite).creating();
            create.value = Bytes::from_static(b"7");
            assert_eq!(
                nats.request(1, &create, &mut Instant::now()).await,
                Outcome::Ok
            );
            let value = nats.read_value(2, asked.as_bytes()).await;
            assert_eq!(value, Ok(Some(Bytes::from_static(b"7"))));
            // A stale revision loses.
            let Ok(Found::Value(_, revision)) = read(kv, &key, true).await else {
                panic!("no value")
            };
            kv.put(&key, Bytes::from_static(b"8")).await.unwrap();
            let stale = kv.update(&key, Bytes::from_static(b"9"), revision).await;
            assert_eq!(outcome(&stale.unwrap_err()), Outcome::Conflict);
            // A value the workload did not write is a wrong value.
            let get = request(OpKind::Read);
            assert_eq!(
                nats.request(0, &get, &mut Instant::now()).await,
                Outcome::WrongValue
            );
            // A deleted key is missing again, also to a direct get.
            kv.delete(&key).await.unwrap();
            assert_eq!(nats.read_value(0, asked.as_bytes()).await, Ok(None));
            assert!(matches!(read(kv, &key, false).await, Ok(Found::Missing(r)) if r > 0));
            kv.purge(&key).await.unwrap();
            // Closing is quick.
            let closing = Instant::now();
            nats.close().await;
            assert!(closing.elapsed() < Duration::from_secs(1));

            let mut other = plan.clone();
            other.options = dict(&[("bucket", s("no-such-bucket"))]);
            let options = crate::protocols::options::<Nats>(&other).unwrap();
            let error = Nats::open(&other, options, &step).await.err().unwrap();
            println!("{}", error.0);
            assert!(
                error.0.contains("has no KV bucket \"no-such-bucket\""),
                "{}",
                error.0
            );
        }
    }
}
