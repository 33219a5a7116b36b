//! Consul's KV API over HTTP/1.1 keep-alive (transport/http1.rs): one TCP
//! connection per connection. HTTP/1.1 cannot multiplex, so a connection
//! serves one request at a time and its clients queue for it; that wait is
//! part of the latency, not of the service time. A read is a GET (`?raw`),
//! an update or insert a PUT, and a read-modify-write a GET of the entry
//! (its ModifyIndex) then a PUT with `?cas=` that index (Consul answers
//! "false" to a lost race: `conflict`). With the plan's `auth`, every
//! request carries its ACL token (X-Consul-Token); with its `tls`, the
//! connections are HTTPS.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use futures_util::future::try_join_all;
use http::header::{CONTENT_LENGTH, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::Full;

use crate::outcome::{EngineError, Outcome};
use crate::plan::{Consistency, Endpoint, Plan, PlanError, Step};
use crate::protocols::{Given, Held, Protocol, Request, within};
use crate::transport::failover::{dial_bound, ordered};
use crate::transport::http1::Conn;
use crate::workload::OpKind;
use crate::workload::watch::{WatchLog, key_number, unless_stopped};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

mod lock;

/// Consul's option is its sessions' lock-delay; its `auth` is an ACL token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// The token every request carries (sensitive: Debug does not show it).
    pub token: Option<HeaderValue>,
    /// A lock load's sessions: how long Consul refuses a lock whose
    /// holder's session was invalidated (seconds).
    pub lock_delay_s: f64,
}

/// The header Consul reads a request's ACL token from.
const TOKEN: HeaderName = HeaderName::from_static("x-consul-token");

const ROOT: &str = "/v1/kv/dbtester/";
/// Consul's longest lock-delay (MaxLockDelay).
const MAX_LOCK_DELAY_S: f64 = 60.0;

pub struct Consul {
    conns: Vec<Arc<Conn>>,
    /// A lock load's: the connection its sessions are renewed over.
    renewer: Option<Arc<Conn>>,
    lock_delay_s: f64,
    /// The read's query: the value alone, with the consistency asked for.
    raw: &'static str,
    /// A read-modify-write's read: the entry (its ModifyIndex), likewise.
    entry: &'static str,
}

impl Protocol for Consul {
    const NAME: &'static str = "consul";
    const OPTION_KEYS: &'static [&'static str] = &["lock_delay_s"];
    const AUTH_KEYS: &'static [&'static str] = &["token"];
    type Options = Options;
    const LOCKS: bool = true;
    type Session = lock::LockSession;

    fn options(given: &Given<'_>) -> Result<Options, PlanError> {
        let lock_delay_s = given
            .options
            .float("lock_delay_s", 0.0, false, MAX_LOCK_DELAY_S)?;
        let Some(auth) = &given.auth else {
            return Ok(Options {
                token: None,
                lock_delay_s,
            });
        };
        let token = auth.secret("token", "an ACL token (a string)")?;
        let mut token = HeaderValue::from_str(token).map_err(|_| {
            PlanError(format!(
                "{} must be text an HTTP header can carry (visible ASCII), and is not",
                auth.name("token")
            ))
        })?;
        token.set_sensitive(true);
        Ok(Options {
            token: Some(token),
            lock_delay_s,
        })
    }

    async fn open(plan: &Plan, options: Options, step: &Step) -> Result<Self, EngineError> {
        let conns =
            try_join_all((0..step.connections).map(|c| connection(plan, &options, c))).await?;
        let (raw, entry) = match plan.consistency {
            Consistency::Linearizable => ("?raw&consistent", "?consistent"),
            Consistency::Serializable => ("?raw&stale", "?stale"),
        };
        let renewer = match plan.locks {
            Some(_) => Some(connection(plan, &options, 0).await?),
            None => None,
        };
        Ok(Consul {
            conns,
            renewer,
            lock_delay_s: options.lock_delay_s,
            raw,
            entry,
        })
    }

    async fn open_session(&self, conn: usize, ttl_s: i64) -> Result<Self::Session, Outcome> {
        let renewer = self.renewer.as_ref().unwrap_or(&self.conns[conn]);
        lock::open(&self.conns[conn], renewer, ttl_s, self.lock_delay_s).await
    }

    async fn acquire(
        &self,
        conn: usize,
        session: &Self::Session,
        name: &[u8],
    ) -> Result<Held, Outcome> {
        lock::acquire(&self.conns[conn], session, name).await
    }

    async fn release(
        &self,
        conn: usize,
        session: &Self::Session,
        held: &Held,
    ) -> Result<(), Outcome> {
        lock::release(&self.conns[conn], session, held).await
    }

    async fn close_session(&self, conn: usize, session: Self::Session) {
        lock::close(&self.conns[conn], session).await;
    }

    async fn abandon_session(&self, _: usize, session: Self::Session) {
        lock::abandon(session).await;
    }

    /// Each watcher holds a connection of its own: a blocking query is one
    /// long poll, and HTTP/1.1 carries one request at a time. A watcher
    /// lists the keys' prefix (`?keys`), blocking until its index passes the
    /// last reply's; the keys a reply lists that the watcher had not seen
    /// are its events, all timed at the reply's arrival. A reply lists
    /// every key under the prefix, so its cost grows with the keys stored.
    /// After a failed query the watcher asks again from the last index, as
    /// Consul's own watches do.
    async fn watch(
        plan: &Plan,
        options: Options,
        log: Arc<WatchLog>,
        stop: CancellationToken,
    ) -> Result<JoinSet<()>, EngineError> {
        let watch = plan.watch.expect("watchers are planned");
        let options = &options;
        let watchers = try_join_all((0..watch.watchers).map(|w| async move {
            let conn = connection(plan, options, w).await?;
            let what = || format!("cannot list {KEYS} on consul at {:?}", conn.host);
            // What is there before the run: its index, and other runs' keys.
            let first = within(plan.timeout, what, async {
                listing(&conn, 0, Duration::ZERO)
                    .await
                    .map_err(|outcome| EngineError(format!("{}: {}", what(), outcome.name())))
            })
            .await?;
            Ok::<_, EngineError>((conn, first))
        }))
        .await?;
        let mut tasks = JoinSet::new();
        for (watcher, (conn, first)) in watchers.into_iter().enumerate() {
            let poll = Poll {
                conn,
                watcher,
                log: log.clone(),
                index: first.index,
                others: first.others(&log),
                timeout: plan.timeout,
            };
            tasks.spawn(poll.run(stop.clone()));
        }
        Ok(tasks)
    }

    async fn request(&self, conn: usize, request: &Request<'_>, sent: &mut Instant) -> Outcome {
        let conn = &self.conns[conn];
        let key = std::str::from_utf8(request.key).unwrap_or_default();
        match request.kind {
            OpKind::Read => match conn.send(get(conn, key, self.raw), sent).await {
                Ok((StatusCode::OK, body)) if request.accepts(&body) => Outcome::Ok,
                Ok((StatusCode::OK, _)) => Outcome::WrongValue,
                Ok((status, _)) => Outcome::Http(status.as_u16()),
                Err(outcome) => outcome,
            },
            OpKind::Update | OpKind::Insert => {
                let put = put(conn, key, "", request.value.clone());
                written(conn.send(put, sent).await, Outcome::Named("write-refused"))
            }
            OpKind::ReadModifyWrite => {
                let index = match conn.send(get(conn, key, self.entry), sent).await {
                    Ok((StatusCode::OK, body)) => match entry(&body) {
                        Some((index, value)) if request.accepts(&value) => index,
                        _ => return Outcome::WrongValue,
                    },
                    Ok((status, _)) => return Outcome::Http(status.as_u16()),
                    Err(outcome) => return outcome,
                };
                // Service time covers both calls: `sent` stays the first's.
                let put = put(conn, key, &format!("?cas={index}"), request.value.clone());
                written(conn.send(put, &mut Instant::now()).await, Outcome::Conflict)
            }
        }
    }

    async fn endpoint(&self, conn: usize) -> Option<Endpoint> {
        Some(self.conns[conn].endpoint().await)
    }

    async fn read_value(&self, conn: usize, key: &[u8]) -> Result<Option<Bytes>, Outcome> {
        let conn = &self.conns[conn];
        let key = std::str::from_utf8(key).unwrap_or_default();
        match conn
            .send(get(conn, key, self.raw), &mut Instant::now())
            .await
        {
            Ok((StatusCode::OK, body)) => Ok(Some(body)),
            Ok((StatusCode::NOT_FOUND, _)) => Ok(None),
            Ok((status, _)) => Err(Outcome::Http(status.as_u16())),
            Err(outcome) => Err(outcome),
        }
    }

    async fn close(self) {
        // Dropping each connection aborts its driver, closing the socket.
        drop(self.conns);
    }
}

/// Connection `c` of a step or of the watchers, its own endpoint first,
/// shown to answer before it counts; every request on it carries the token.
async fn connection(plan: &Plan, options: &Options, c: usize) -> Result<Arc<Conn>, EngineError> {
    let endpoints = ordered(&plan.endpoints, c % plan.endpoints.len());
    let what = || format!("cannot connect to consul at {}", endpoints[0].authority);
    let host = HeaderValue::from_str(&endpoints[0].authority)
        .map_err(|e| EngineError(format!("{}: {e}", what())))?;
    let mut headers = HeaderMap::new();
    if let Some(token) = &options.token {
        headers.insert(TOKEN, token.clone());
    }
    within(plan.timeout, what, async {
        let conn = Conn::open(endpoints.clone(), host, headers, dial_bound(plan.timeout))
            .await
            .map_err(|e| EngineError(format!("{}: {}", what(), e.text)))?;
        probe(&conn)
            .await
            .map_err(|e| EngineError(format!("{}: {}", what(), e)))?;
        Ok(conn)
    })
    .await
}

/// The prefix the keys live under, as a listing names it.
const KEYS: &str = "dbtester/";
/// How long one blocking query may wait for a change (Consul adds up to a
/// sixteenth as jitter); a quiet prefix costs one reply per this.
const BLOCK: Duration = Duration::from_secs(30);
/// The pause after a failed query before the next, so a watcher whose
/// member is down does not spin.
const RETRY: Duration = Duration::from_millis(50);

/// One reply to a listing of the prefix.
struct Listing {
    /// X-Consul-Index: the prefix's index when it was answered.
    index: u64,
    /// The key numbers it lists (u64::MAX for a key that names none).
    keys: Vec<u64>,
}

impl Listing {
    /// How many of its keys are no put's of this run.
    fn others(&self, log: &WatchLog) -> u64 {
        let of_run = |k: &&u64| log.sent().offset(**k).is_some();
        (self.keys.len() - self.keys.iter().filter(of_run).count()) as u64
    }
}

/// The prefix's keys once its index passes `index` (at once for 0), or
/// after `wait` (none: Consul's default).
async fn listing(conn: &Arc<Conn>, index: u64, wait: Duration) -> Result<Listing, Outcome> {
    let wait = if wait.is_zero() {
        String::new()
    } else {
        format!("&wait={}s", wait.as_secs())
    };
    let request = get(conn, "", &format!("?keys&index={index}{wait}"));
    let (head, body) = conn.exchange(request, &mut Instant::now()).await?;
    match head.status {
        // No key under the prefix yet.
        StatusCode::NOT_FOUND | StatusCode::OK => {}
        status => return Err(Outcome::Http(status.as_u16())),
    }
    let index = head
        .headers
        .get("x-consul-index")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .ok_or(Outcome::Named("no-consul-index"))?;
    let keys = if head.status == StatusCode::NOT_FOUND {
        Vec::new()
    } else {
        listed_keys(&body).ok_or(Outcome::Named("bad-listing"))?
    };
    Ok(Listing { index, keys })
}

/// The key numbers of a `?keys` reply (`["dbtester/k0001", ...]`).
fn listed_keys(body: &[u8]) -> Option<Vec<u64>> {
    let names: Vec<std::borrow::Cow<'_, str>> = serde_json::from_slice(body).ok()?;
    Some(
        names
            .iter()
            .map(|name| {
                let key = name.strip_prefix(KEYS).unwrap_or(name);
                key_number(key.as_bytes()).unwrap_or(u64::MAX)
            })
            .collect(),
    )
}

/// One watcher's blocking queries.
struct Poll {
    conn: Arc<Conn>,
    watcher: usize,
    log: Arc<WatchLog>,
    /// The last reply's index: the next query waits for the prefix to pass it.
    index: u64,
    /// Keys of other runs in the last reply.
    others: u64,
    timeout: Duration,
}

impl Poll {
    /// Asks until `stop`; a failed query is asked again from the last index.
    async fn run(mut self, stop: CancellationToken) {
        let limit = BLOCK + BLOCK / 16 + self.timeout;
        loop {
            let query = tokio::time::timeout(limit, listing(&self.conn, self.index, BLOCK));
            let Some(reply) = unless_stopped(&stop, query).await else {
                break;
            };
            let arrived = Instant::now();
            match reply {
                Ok(Ok(listing)) => self.note(listing, arrived),
                Ok(Err(_)) | Err(_) => {
                    if unless_stopped(&stop, tokio::time::sleep(RETRY))
                        .await
                        .is_none()
                    {
                        break;
                    }
                }
            }
        }
    }

    fn note(&mut self, listing: Listing, arrived: Instant) {
        // An index that went back (a new leader's, a restored snapshot's)
        // starts over from 0, as Consul's documentation says to.
        let index = listing.index;
        let others = listing.others(&self.log);
        if others > self.others {
            self.log.foreign(self.watcher, others - self.others);
        }
        self.others = others;
        let revision = i64::try_from(index).unwrap_or(i64::MAX);
        self.log
            .listed(self.watcher, listing.keys, revision, arrived);
        self.index = if index < self.index { 0 } else { index };
    }
}

fn get(conn: &Conn, key: &str, query: &str) -> http::Request<Full<Bytes>> {
    http::Request::builder()
        .method(Method::GET)
        .uri(format!("{ROOT}{key}{query}"))
        .header(HOST, conn.host.clone())
        .body(Full::new(Bytes::new()))
        .expect("keys are \"k\" and digits: a valid URI")
}

fn put(conn: &Conn, key: &str, query: &str, value: Bytes) -> http::Request<Full<Bytes>> {
    http::Request::builder()
        .method(Method::PUT)
        .uri(format!("{ROOT}{key}{query}"))
        .header(HOST, conn.host.clone())
        .header(CONTENT_LENGTH, value.len())
        .body(Full::new(value))
        .expect("keys are \"k\" and digits: a valid URI")
}

/// A PUT's outcome: Consul answers "true", or "false" when it declined the
/// write (`refused` names that).
fn written(reply: Result<(StatusCode, Bytes), Outcome>, refused: Outcome) -> Outcome {
    match reply {
        Ok((StatusCode::OK, body)) if body.trim_ascii() == b"true" => Outcome::Ok,
        Ok((StatusCode::OK, _)) => refused,
        Ok((status, _)) => Outcome::Http(status.as_u16()),
        Err(outcome) => outcome,
    }
}

/// The ModifyIndex and value of a KV GET's one entry
/// (`[{"ModifyIndex": N, "Value": "<base64>", ...}]`); None if it is not one.
fn entry(body: &[u8]) -> Option<(u64, Vec<u8>)> {
    let entries: serde_json::Value = serde_json::from_slice(body).ok()?;
    let entry = entries.as_array()?.first()?;
    let index = entry.get("ModifyIndex")?.as_u64()?;
    let value = match entry.get("Value")? {
        serde_json::Value::Null => Vec::new(),
        encoded => base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str()?)
            .ok()?,
    };
    Some((index, value))
}

/// An accepted TCP connection proves little: one cheap call (who leads)
/// shows a Consul answers on it before the step counts on it.
async fn probe(conn: &Arc<Conn>) -> Result<(), String> {
    let request = http::Request::builder()
        .method(Method::GET)
        .uri("/v1/status/leader")
        .header(HOST, conn.host.clone())
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    match conn.send(request, &mut Instant::now()).await {
        Ok((StatusCode::OK, _)) => Ok(()),
        Ok((status, _)) => Err(format!(
            "GET /v1/status/leader answered HTTP {}",
            status.as_u16()
        )),
        Err(outcome) => Err(outcome.name().into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use std::sync::Mutex;

    use tokio::io::{
        AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
    };
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;

    use super::*;
    use crate::plan::Secret;
    use crate::transport::tls;
    use crate::workload::Workload;

    /// A minimal HTTP/1.1 keep-alive server answering every request "true".
    /// (Consul itself is exercised live; this isolates the client's queueing.)
    async fn serve_true() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        serve_on(listener);
        addr
    }

    /// The same server on `listener`; aborting the task closes the listener
    /// and every connection it accepted (a member killed).
    fn serve_on(listener: TcpListener) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                connections.spawn(answer_true(socket, Arc::default()));
            }
        })
    }

    /// Answers every request on `stream` "true", noting each request's
    /// header lines in `heads`.
    async fn answer_true<S: AsyncRead + AsyncWrite>(stream: S, heads: Arc<Mutex<Vec<String>>>) {
        let (read, mut write) = tokio::io::split(stream);
        let mut read = BufReader::new(read);
        let mut line = String::new();
        loop {
            let mut length = 0;
            let mut head = String::new();
            loop {
                line.clear();
                if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                if line == "\r\n" {
                    break;
                }
                head.push_str(&line.to_ascii_lowercase());
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            heads.lock().unwrap().push(head);
            let mut body = vec![0; length];
            read.read_exact(&mut body).await.unwrap();
            let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\ntrue";
            if write.write_all(reply).await.is_err() {
                return;
            }
        }
    }

    /// Over TLS (http/1.1 by ALPN), with the plan's token on every request,
    /// the probe's and the load's alike.
    #[tokio::test]
    async fn requests_go_over_tls_with_the_token() {
        use crate::plan::pki::{Pki, plan};
        use crate::plan::tests::{dict, s};
        let pki = Pki::new();
        let (listener, address) = listen().await;
        let heads = Arc::new(Mutex::new(Vec::new()));
        let acceptor = tokio_rustls::TlsAcceptor::from(pki.server(tls::HTTP1, true));
        let seen = heads.clone();
        tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let stream = acceptor.accept(socket).await.unwrap();
            assert_eq!(stream.get_ref().1.alpn_protocol(), Some(tls::HTTP1));
            answer_true(stream, seen).await;
        });
        let mut plan = plan(address, pki.plan(&pki.ca, true));
        plan.protocol = Consul::NAME.into();
        plan.options = dict(&[("lock_delay_s", crate::plan::Value::Float(15.0))]);
        plan.auth = Some(Secret::new(dict(&[("token", s("acl-t0ken"))])));
        let options = crate::protocols::options::<Consul>(&plan).unwrap();
        assert_eq!(
            format!("{options:?}"),
            "Options { token: Some(Sensitive), lock_delay_s: 15.0 }"
        );
        let consul = Consul::open(&plan, options, &ONE).await.unwrap();
        assert_eq!(put(&consul).await, Outcome::Ok);
        let heads = heads.lock().unwrap();
        assert_eq!(heads.len(), 2, "the probe and the put");
        for head in heads.iter() {
            assert!(head.contains("x-consul-token: acl-t0ken\r\n"), "{head}");
        }
    }

    fn plan_for(addrs: &[std::net::SocketAddr]) -> Plan {
        let mut plan = crate::plan::tests::good_plan();
        plan.protocol = Consul::NAME.into();
        plan.options = crate::plan::Value::Dict(Vec::new());
        plan.endpoints = addrs
            .iter()
            .map(|a| crate::plan::parse_endpoint(&a.to_string()).unwrap())
            .collect();
        plan
    }

    const ONE: Step = Step {
        clients: 1,
        connections: 1,
        requests: 0,
        rate: 0.0,
    };

    async fn listen() -> (TcpListener, std::net::SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        (listener, addr)
    }

    /// An insert of key 1, judged by `workload`.
    fn insert(workload: &Workload) -> Request<'_> {
        Request::new(
            OpKind::Insert,
            b"k0000001",
            Bytes::from_static(b"vv"),
            1,
            workload,
        )
    }

    async fn put(consul: &Consul) -> Outcome {
        let workload = Workload::new(&crate::plan::tests::good_plan()).unwrap();
        consul
            .request(0, &insert(&workload), &mut Instant::now())
            .await
    }

    async fn at(consul: &Consul) -> usize {
        consul.conns[0].at().await
    }

    #[tokio::test]
    async fn a_connection_moves_to_the_next_endpoint_and_back_home() {
        let (home, home_addr) = listen().await;
        let (second, second_addr) = listen().await;
        let home_server = serve_on(home);
        serve_on(second);
        let consul = Consul::open(
            &plan_for(&[home_addr, second_addr]),
            Options::default(),
            &ONE,
        )
        .await
        .unwrap();
        assert_eq!(put(&consul).await, Outcome::Ok);
        // Home is killed: at most the request it dies under fails, then the
        // connection is on the second endpoint.
        home_server.abort();
        let _ = home_server.await;
        let mut failed = 0;
        while put(&consul).await != Outcome::Ok {
            failed += 1;
            assert!(failed <= 1, "requests fail on the second endpoint");
        }
        assert_eq!(at(&consul).await, 1);
        // Home is back: within HOME_RETRY (and a dial) the connection returns.
        serve_on(TcpListener::bind(home_addr).await.unwrap());
        let back = Instant::now();
        while at(&consul).await != 0 {
            assert_eq!(put(&consul).await, Outcome::Ok);
            assert!(back.elapsed() < Duration::from_secs(3), "not back home");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(put(&consul).await, Outcome::Ok);

        // Home refuses from the start: the connection opens on the second.
        let (refusing, refusing_addr) = listen().await;
        drop(refusing);
        let consul = Consul::open(
            &plan_for(&[refusing_addr, second_addr]),
            Options::default(),
            &ONE,
        )
        .await
        .unwrap();
        assert_eq!(at(&consul).await, 1);
        assert_eq!(put(&consul).await, Outcome::Ok);
    }

    #[tokio::test]
    async fn when_no_endpoint_accepts_requests_fail_without_dialling_during_the_backoff() {
        let (one, one_addr) = listen().await;
        let (two, two_addr) = listen().await;
        let servers = [serve_on(one), serve_on(two)];
        let consul = Consul::open(&plan_for(&[one_addr, two_addr]), Options::default(), &ONE)
            .await
            .unwrap();
        assert_eq!(put(&consul).await, Outcome::Ok);
        for server in servers {
            server.abort();
            let _ = server.await;
        }
        let dials = || async { consul.conns[0].dials().await };
        // The request that finds the connection gone (or dies with it) and
        // the next dial both endpoints and fail refused...
        let mut outcome = put(&consul).await;
        if outcome != Outcome::ConnectionRefused {
            outcome = put(&consul).await;
        }
        assert_eq!(outcome, Outcome::ConnectionRefused);
        let before = dials().await;
        // ...and the ones during the backoff (50 ms) fail the same way
        // without a dial.
        let started = Instant::now();
        for _ in 0..100 {
            assert_eq!(put(&consul).await, Outcome::ConnectionRefused);
        }
        if started.elapsed() < Duration::from_millis(40) {
            assert_eq!(dials().await, before);
        }
        // After it, a request dials again. Each failed dial doubles the
        // backoff, up to 1 s, and on a busy machine the puts above may have
        // outlasted the first 50 ms and dialled (and failed) again: so the
        // puts go on for up to 3 s, a bound that holds at any backoff.
        tokio::time::sleep(Duration::from_millis(60)).await;
        serve_on(TcpListener::bind(two_addr).await.unwrap());
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut outcome = put(&consul).await;
        while outcome == Outcome::ConnectionRefused && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            outcome = put(&consul).await;
        }
        assert_eq!(outcome, Outcome::Ok);
        assert_eq!(at(&consul).await, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clients_sharing_a_connection_take_turns() {
        let addr = serve_true().await;
        let mut plan = crate::plan::tests::good_plan();
        plan.protocol = Consul::NAME.into();
        plan.options = crate::plan::Value::Dict(Vec::new());
        plan.endpoints = vec![crate::plan::parse_endpoint(&addr.to_string()).unwrap()];
        let step = Step {
            clients: 100,
            connections: 10,
            requests: 0,
            rate: 0.0,
        };
        let consul = Arc::new(
            Consul::open(&plan, Options::default(), &step)
                .await
                .unwrap(),
        );
        let workload = Arc::new(Workload::new(&plan).unwrap());
        // Turns are counted from `begin` on: the clients the barrier releases
        // are run one by one, and the first may take turns alone on its
        // connection before the others line up (CI saw one 26 ahead of its
        // neighbours, 118 against 92, all of it at the start).
        let begin = Instant::now() + Duration::from_millis(200);
        let until = begin + Duration::from_millis(500);
        let start = Arc::new(tokio::sync::Barrier::new(step.clients));
        let mut clients = Vec::new();
        for client in 0..step.clients {
            let consul = consul.clone();
            let workload = workload.clone();
            let start = start.clone();
            clients.push(tokio::spawn(async move {
                start.wait().await;
                let mut done = 0u32;
                while Instant::now() < until {
                    let mut sent = Instant::now();
                    let counted = sent >= begin;
                    let request = insert(&workload);
                    let outcome = consul.request(client % 10, &request, &mut sent).await;
                    assert_eq!(outcome, Outcome::Ok);
                    done += u32::from(counted);
                }
                done
            }));
        }
        let mut done = Vec::new();
        for client in clients {
            done.push(client.await.unwrap());
        }
        // First come, first served: each client of a connection gets one turn
        // per round, so none falls far behind the others on its connection.
        // Not exactly: a client the scheduler has not run yet is not in line,
        // and on a loaded machine (CI runs other tests meanwhile) one was
        // seen 20 turns behind its neighbours (122 against 102). So the bound
        // is a quarter of the middle share: still far below what a lock that
        // lets the last holder cut in would give (one client nearly all).
        assert!(done.iter().all(|d| *d >= 5), "too few requests: {done:?}");
        for conn in 0..step.connections {
            let share: Vec<u32> = done
                .iter()
                .skip(conn)
                .step_by(step.connections)
                .copied()
                .collect();
            let (least, most) = (share.iter().min().unwrap(), share.iter().max().unwrap());
            let mut sorted = share.clone();
            sorted.sort_unstable();
            let bound = (sorted[sorted.len() / 2] / 4).max(2);
            assert!(most - least <= bound, "connection {conn} unfair: {share:?}");
        }
    }

    #[test]
    fn replies_are_checked() {
        let reply = |status: u16, body: &'static [u8]| {
            Ok((
                StatusCode::from_u16(status).unwrap(),
                Bytes::from_static(body),
            ))
        };
        let refused = Outcome::Named("write-refused");
        assert_eq!(written(reply(200, b"true\n"), refused.clone()), Outcome::Ok);
        assert_eq!(written(reply(200, b"false"), refused.clone()), refused);
        assert_eq!(
            written(reply(200, b"false"), Outcome::Conflict),
            Outcome::Conflict
        );
        assert_eq!(written(reply(500, b""), refused.clone()).name(), "HTTP-500");
        assert_eq!(
            written(Err(Outcome::ConnectionRefused), refused),
            Outcome::ConnectionRefused
        );
    }

    #[test]
    fn entries_give_their_index_and_value() {
        let body = br#"[{"LockIndex":0,"Key":"dbtester/k1","Flags":0,"Value":"dnY=","CreateIndex":5,"ModifyIndex":12}]"#;
        assert_eq!(entry(body), Some((12, b"vv".to_vec())));
        let empty = br#"[{"Key":"dbtester/k1","Value":null,"ModifyIndex":3}]"#;
        assert_eq!(entry(empty), Some((3, Vec::new())));
        assert_eq!(entry(b"[]"), None);
        assert_eq!(entry(b"vv"), None);
        assert_eq!(entry(br#"[{"Value":"!!","ModifyIndex":3}]"#), None);
    }
}
