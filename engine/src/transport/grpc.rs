//! Unary gRPC calls straight on h2, for etcd. A call is one HTTP/2 stream:
//! request headers and one length-prefixed message out, then reply headers,
//! the reply message and trailers holding the gRPC status back.
//!
//! tonic's Channel put a tower buffer task, hyper's dispatcher and a task per
//! request body between a call and its connection, and turned every reply's
//! trailers into a metadata map and a Status: 44% of the engine's
//! instructions per call (benchmarks/engine_instructions.py). Here a call
//! drives its stream itself and only looks at what the outcome needs.
//!
//! Failures keep the meaning they had through tonic: a status the server sent
//! is that status; a reply that is not gRPC (bad framing, a message that does
//! not decode, no message) is INTERNAL; a call that got no reply (no
//! connection, the connection or the stream lost) is a transport failure.
//!
//! A connection runs over TLS when its endpoints carry it, and with a login
//! (etcd's auth) logs in on every new connection before its calls: tokens
//! belong to a member, so a redial or a move to another one logs in again.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use h2::RecvStream;
use h2::client::SendRequest;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, TE};
use http::uri::{Authority, PathAndQuery, Scheme, Uri};
use http::{Method, Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::plan::Endpoint;
use crate::transport::failover::{self, Backoff, Homing};
use crate::transport::{coalesce, tls};

/// Names of gRPC's status codes, by number.
const CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// A gRPC status code (0 to 16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code(u8);

impl Code {
    pub const OK: Code = Code(0);
    pub const UNKNOWN: Code = Code(2);
    pub const INVALID_ARGUMENT: Code = Code(3);
    pub const PERMISSION_DENIED: Code = Code(7);
    pub const UNIMPLEMENTED: Code = Code(12);
    pub const INTERNAL: Code = Code(13);
    pub const UNAVAILABLE: Code = Code(14);
    pub const UNAUTHENTICATED: Code = Code(16);

    /// gRPC's own name for the code.
    pub fn name(self) -> &'static str {
        CODE_NAMES[usize::from(self.0)]
    }

    /// A `grpc-status` value: "0" to "16"; anything else is UNKNOWN.
    pub fn parse(value: &[u8]) -> Code {
        match *value {
            [d @ b'0'..=b'9'] => Code(d - b'0'),
            [b'1', d @ b'0'..=b'6'] => Code(10 + d - b'0'),
            _ => Code::UNKNOWN,
        }
    }

    /// The status gRPC infers from an HTTP reply that carried none.
    fn from_http(status: StatusCode) -> Code {
        match status {
            StatusCode::BAD_REQUEST => Code::INTERNAL,
            StatusCode::UNAUTHORIZED => Code::UNAUTHENTICATED,
            StatusCode::FORBIDDEN => Code::PERMISSION_DENIED,
            StatusCode::NOT_FOUND => Code::UNIMPLEMENTED,
            StatusCode::TOO_MANY_REQUESTS
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT => Code::UNAVAILABLE,
            _ => Code::UNKNOWN,
        }
    }
}

pub type BoxError = Box<dyn StdError + Send + Sync>;

/// Why a call did not return a message.
#[derive(Debug)]
pub enum Failure {
    /// No reply: connecting failed, or the connection or the stream was lost.
    Transport(BoxError),
    /// The server's status (never OK) and its message (grpc-message; empty
    /// when it sent none), or INTERNAL for a reply that is not a
    /// well-formed gRPC reply.
    Status(Code, Box<str>),
}

impl Failure {
    fn transport(error: impl Into<BoxError>) -> Failure {
        Failure::Transport(error.into())
    }

    /// A status without a message (one the client infers).
    fn status(code: Code) -> Failure {
        Failure::Status(code, Box::default())
    }
}

/// What every call on a connection carries once it logged in (etcd's auth
/// token, in the header etcd reads it from). Debug hides the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    name: HeaderName,
    value: HeaderValue,
}

impl Credential {
    /// `value` under header `name`; h2 neither indexes nor shows it.
    pub fn new(name: HeaderName, mut value: HeaderValue) -> Self {
        value.set_sensitive(true);
        Credential { name, value }
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Logging in on every new connection before calls use it (etcd's
/// Authenticate): a redial or a move to another member logs in again there.
pub trait Login: Send + Sync + 'static {
    /// Logs in with calls on the new connection: what every call on it
    /// then carries. An error says why, for the engine's start error.
    fn log_in<'a>(
        &'a self,
        calls: &'a Caller,
    ) -> Pin<Box<dyn Future<Output = Result<Credential, BoxError>> + Send + 'a>>;

    /// Whether a call that failed so did for want of a valid credential
    /// (one that expired, or a restarted server forgot): the connection
    /// logs in again and the call is made once more.
    fn expired(&self, failure: &Failure) -> bool;
}

/// Calls on a connection that is not handed out yet: what a login makes.
pub struct Caller {
    sender: SendRequest<Bytes>,
    target: Target,
}

impl Caller {
    /// Calls method `path` with `message` (framed), as `Conn::unary` does.
    pub async fn unary<T>(
        &self,
        path: &'static str,
        message: Bytes,
        decode: impl Fn(&[u8]) -> Option<T>,
    ) -> Result<T, Failure> {
        let uri = self.target.uri(path);
        let sender = self.sender.clone().ready().await;
        call(
            sender.map_err(Failure::transport)?,
            &uri,
            None,
            message,
            decode,
        )
        .await
    }
}

/// What a request's URI names: the scheme (https over TLS) and the own
/// endpoint's authority, wherever the request goes (as a gRPC channel names
/// its target, not the backend; etcd does not check it).
#[derive(Clone)]
struct Target {
    scheme: Scheme,
    authority: Authority,
}

impl Target {
    fn uri(&self, path: &'static str) -> Uri {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(PathAndQuery::from_static(path));
        Uri::from_parts(parts).expect("scheme, authority and path make a URI")
    }
}

/// A connection ready for calls: its handle, and the credential its calls
/// carry (None: no login).
#[derive(Clone)]
struct Linked {
    sender: SendRequest<Bytes>,
    credential: Option<Credential>,
}

/// A live HTTP/2 connection: the handle streams open on. A task drives its
/// socket until the connection fails, or closes it (GOAWAY) once the last
/// handle is dropped and no stream is left, as tonic's connections closed.
struct Link {
    linked: Linked,
    /// Which connection this is (counts redials): a caller that saw it fail
    /// redials only if no one replaced it meanwhile.
    generation: u64,
    /// The endpoint it is to (an index into `Shared::endpoints`; 0 is home).
    at: usize,
    /// Whether a task is trying to go back home (one at a time).
    homing: bool,
}

/// One HTTP/2 connection to the cluster, redialled when it is lost (as
/// tonic's Channel did), through the cluster's endpoints as failover.rs
/// describes: a call that finds it broken dials its current endpoint again,
/// then the next ones, and fails as a transport failure if none accepts.
/// A clone is the same connection (a lease's keep-alive task holds one).
#[derive(Clone)]
pub struct Conn {
    shared: Arc<Shared>,
}

/// What calls and the task bringing the connection home share.
struct Shared {
    /// Its own endpoint first, then the others (failover::ordered).
    endpoints: Vec<Endpoint>,
    dialer: Dialer,
    dial_timeout: Duration,
    link: Mutex<Link>,
    /// One redial or login at a time; the others wait and use its
    /// connection. It also holds the backoff after every endpoint refused.
    redial: tokio::sync::Mutex<Backoff>,
}

/// How a new connection is made ready: dialled, then logged in on.
#[derive(Clone)]
struct Dialer {
    target: Target,
    login: Option<Arc<dyn Login>>,
}

impl Dialer {
    /// Logs in on `sender`'s connection, if there is a login.
    async fn log_in(&self, sender: SendRequest<Bytes>) -> Result<Linked, BoxError> {
        let Some(login) = &self.login else {
            return Ok(Linked {
                sender,
                credential: None,
            });
        };
        let calls = Caller {
            sender,
            target: self.target.clone(),
        };
        let credential = login.log_in(&calls).await?;
        Ok(Linked {
            sender: calls.sender,
            credential: Some(credential),
        })
    }
}

impl Conn {
    /// Connects (TCP, TLS if the endpoints have it, the HTTP/2 preface and
    /// a PING; then `login`, if any) to the first of `endpoints` that
    /// accepts, each dial bounded by `dial_timeout` (the login is not: it
    /// bounds its own calls).
    pub async fn open(
        endpoints: Vec<Endpoint>,
        dial_timeout: Duration,
        login: Option<Arc<dyn Login>>,
    ) -> Result<Conn, BoxError> {
        let scheme = match endpoints[0].tls {
            Some(_) => Scheme::HTTPS,
            None => Scheme::HTTP,
        };
        let target = Target {
            scheme,
            authority: Authority::try_from(endpoints[0].authority.as_str())?,
        };
        let dialer = Dialer { target, login };
        let (at, linked) = dial_any(&dialer, &endpoints, 0, dial_timeout).await?;
        let shared = Arc::new(Shared {
            endpoints,
            dialer,
            dial_timeout,
            link: Mutex::new(Link {
                linked,
                generation: 0,
                at: 0,
                homing: false,
            }),
            redial: tokio::sync::Mutex::new(Backoff::default()),
        });
        if at != 0 {
            install(&shared, at, None);
        }
        Ok(Conn { shared })
    }

    /// The endpoint the connection is on now (or was on when it was lost).
    pub fn endpoint(&self) -> Endpoint {
        let at = self.shared.lock().at;
        self.shared.endpoints[at].clone()
    }

    /// The URI of method `path` ("/package.Service/Method") on this server.
    pub fn uri(&self, path: &'static str) -> Uri {
        self.shared.dialer.target.uri(path)
    }

    /// Calls `uri` with `message` (already framed by `frame`). Every message
    /// of the reply goes through `decode` (None: it does not decode); the
    /// first one's result is returned. With a login, a call refused for its
    /// credential logs in again and is made once more.
    pub async fn unary<T>(
        &self,
        uri: &Uri,
        message: Bytes,
        decode: impl Fn(&[u8]) -> Option<T>,
    ) -> Result<T, Failure> {
        let linked = self.ready().await?;
        let Some(login) = &self.shared.dialer.login else {
            // No login, no copy of the message for a second try.
            return call(linked.sender, uri, None, message, decode).await;
        };
        let credential = linked.credential.as_ref();
        let reply = call(linked.sender, uri, credential, message.clone(), &decode).await;
        match reply {
            Err(failure) if login.expired(&failure) => {
                let Ok(again) = self.log_in_again(&linked.credential).await else {
                    return Err(failure);
                };
                let credential = again.credential.as_ref();
                call(again.sender, uri, credential, message, decode).await
            }
            reply => reply,
        }
    }

    /// Opens a streaming call to `uri` and sends `first` (already framed) on
    /// it, leaving the stream open for more (a Watch). A server that ends the
    /// call at once (a trailers-only reply) fails it with its status; one
    /// refused for its credential is opened once more after a new login.
    pub async fn stream(&self, uri: &Uri, first: Bytes) -> Result<Stream, Failure> {
        let linked = self.ready().await?;
        let credential = linked.credential.as_ref();
        let opened = open_stream(linked.sender, uri, credential, first.clone()).await;
        match (opened, &self.shared.dialer.login) {
            (Err(failure), Some(login)) if login.expired(&failure) => {
                let Ok(again) = self.log_in_again(&linked.credential).await else {
                    return Err(failure);
                };
                open_stream(again.sender, uri, again.credential.as_ref(), first).await
            }
            (opened, _) => opened,
        }
    }

    /// A handle that may open a stream now, redialling if the connection is gone.
    async fn ready(&self) -> Result<Linked, Failure> {
        let (generation, linked) = self.current();
        match linked.sender.ready().await {
            Ok(sender) => Ok(Linked {
                sender,
                credential: linked.credential,
            }),
            Err(_) => self.redialled(generation).await,
        }
    }

    fn current(&self) -> (u64, Linked) {
        let link = self.shared.lock();
        (link.generation, link.linked.clone())
    }

    /// Which endpoint (index into its list) the connection is on now.
    #[cfg(test)]
    fn at(&self) -> usize {
        self.shared.lock().at
    }

    /// A fresh connection in place of connection `failed`, unless another
    /// caller replaced it already: its endpoint again, then the next ones.
    /// While the backoff after all of them refused lasts, none is dialled.
    async fn redialled(&self, failed: u64) -> Result<Linked, Failure> {
        let shared = &self.shared;
        let mut backoff = shared.redial.lock().await;
        let (generation, linked) = self.current();
        if generation != failed {
            return ready(linked).await;
        }
        if backoff.waiting(Instant::now()) {
            return Err(Failure::transport(
                "no endpoint accepted a connection (backing off)",
            ));
        }
        let from = shared.lock().at;
        match dial_any(&shared.dialer, &shared.endpoints, from, shared.dial_timeout).await {
            Ok((at, linked)) => {
                backoff.succeeded();
                install(shared, at, Some(linked.clone()));
                ready(linked).await
            }
            Err(error) => {
                backoff.failed(Instant::now());
                Err(Failure::Transport(error))
            }
        }
    }

    /// The connection after a new login on it, unless another caller's call
    /// was refused for the same `stale` credential and logged in already
    /// (or the connection was replaced, with a login of its own).
    async fn log_in_again(&self, stale: &Option<Credential>) -> Result<Linked, Failure> {
        let shared = &self.shared;
        let _turn = shared.redial.lock().await;
        let (generation, linked) = self.current();
        if linked.credential != *stale {
            return ready(linked).await;
        }
        let sender = linked.sender.ready().await.map_err(Failure::transport)?;
        let linked = shared
            .dialer
            .log_in(sender)
            .await
            .map_err(Failure::Transport)?;
        let mut link = shared.lock();
        if link.generation == generation {
            link.linked.credential = linked.credential.clone();
        }
        Ok(linked)
    }
}

/// `linked` once its connection may open a stream.
async fn ready(linked: Linked) -> Result<Linked, Failure> {
    let sender = linked.sender.ready().await.map_err(Failure::transport)?;
    Ok(Linked {
        sender,
        credential: linked.credential,
    })
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Makes `linked` (on endpoint `at`) the connection, a new generation (None:
/// the one there is already on `at`); away from home, starts the task that
/// brings it back.
fn install(shared: &Arc<Shared>, at: usize, linked: Option<Linked>) {
    let mut link = shared.lock();
    if let Some(linked) = linked {
        link.linked = linked;
        link.generation += 1;
    }
    link.at = at;
    if at != 0 && !link.homing {
        link.homing = true;
        tokio::spawn(failover::go_home(Arc::downgrade(shared)));
    }
}

/// Dialling home: the own endpoint, and the login on a new connection.
struct Home {
    endpoint: Endpoint,
    dialer: Dialer,
}

impl Homing for Shared {
    type Link = Linked;
    type Home = Home;

    async fn away(&self) -> Option<(Home, Duration)> {
        let mut link = self.lock();
        if link.at == 0 {
            link.homing = false; // a redial wrapped round to it
            return None;
        }
        let home = Home {
            endpoint: self.endpoints[0].clone(),
            dialer: self.dialer.clone(),
        };
        Some((home, self.dial_timeout))
    }

    async fn dial(home: &Home) -> Option<Linked> {
        let sender = dial(&home.endpoint).await.ok()?;
        home.dialer.log_in(sender).await.ok()
    }

    /// New calls go home; calls in flight finish on the old connection,
    /// which closes after them.
    async fn arrive(&self, linked: Linked) {
        // After any redial in progress, so that one cannot replace this.
        let mut backoff = self.redial.lock().await;
        backoff.succeeded();
        let mut link = self.lock();
        if link.at != 0 {
            link.linked = linked;
            link.generation += 1;
            link.at = 0;
        }
        link.homing = false;
    }
}

/// The first of `endpoints` from index `from` on (wrapping round) that
/// accepts a connection within `bound` and a login on it: its index and
/// the connection.
async fn dial_any(
    dialer: &Dialer,
    endpoints: &[Endpoint],
    from: usize,
    bound: Duration,
) -> Result<(usize, Linked), BoxError> {
    let mut errors: Vec<(String, BoxError)> = Vec::new();
    for i in 0..endpoints.len() {
        let at = (from + i) % endpoints.len();
        let error = match tokio::time::timeout(bound, dial(&endpoints[at])).await {
            Ok(Ok(sender)) => match dialer.log_in(sender).await {
                Ok(linked) => return Ok((at, linked)),
                Err(error) => error,
            },
            Ok(Err(error)) => error,
            Err(_) => format!("no connection within {:.3} s", bound.as_secs_f64()).into(),
        };
        errors.push((endpoints[at].authority.clone(), error));
    }
    if errors.len() == 1 {
        // One endpoint: its own error, its kind (refused, reset) intact.
        return Err(errors.remove(0).1);
    }
    let each: Vec<(String, String)> = errors
        .iter()
        .map(|(authority, error)| (authority.clone(), crate::outcome::chain(error.as_ref())))
        .collect();
    Err(failover::none_accepted(&each).into())
}

/// A TCP connection with Nagle off, TLS on it when the endpoint has it (h2
/// by ALPN), its writes gathered (coalesce.rs), and HTTP/2 on that.
async fn dial(endpoint: &Endpoint) -> Result<SendRequest<Bytes>, BoxError> {
    let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port)).await?;
    tcp.set_nodelay(true)?;
    match &endpoint.tls {
        None => {
            let (socket, sink) = coalesce::split(tcp);
            handshake(socket, sink).await
        }
        Some(config) => {
            let stream = tls::handshake(config, tcp, tls::H2).await?;
            let (socket, sink) = coalesce::split_stream(stream);
            handshake(socket, sink).await
        }
    }
}

/// HTTP/2 with hyper's client settings (what tonic used): 2 MB stream and
/// 5 MB connection windows; then a PING answered.
async fn handshake<R, W>(
    socket: coalesce::Socket<R>,
    sink: coalesce::Sink<W>,
) -> Result<SendRequest<Bytes>, BoxError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (sender, mut connection) = h2::client::Builder::new()
        .initial_max_send_streams(100)
        .initial_window_size(2 << 20)
        .initial_connection_window_size(5 << 20)
        .max_frame_size(16 << 10)
        .max_header_list_size(16 << 10)
        .max_send_buffer_size(1 << 20)
        .max_local_error_reset_streams(Some(1024))
        .enable_push(false)
        .handshake::<_, Bytes>(socket)
        .await?;
    let ping = connection.ping_pong();
    tokio::spawn(async move {
        // Its error reaches every stream and the next ready(); nothing to do here.
        let _ = coalesce::Driver::new(connection, sink).await;
    });
    // The handshake only wrote the preface; a server that answers a PING is
    // there (a paused one's kernel accepted the TCP connection all the same),
    // as gRPC waits for the server's preface before it uses a connection.
    if let Some(mut ping) = ping {
        ping.ping(h2::Ping::opaque()).await?;
    }
    Ok(sender)
}

/// A unary call on `sender`'s connection: the request, `message`, and the
/// reply read as `Conn::unary` says.
async fn call<T>(
    mut sender: SendRequest<Bytes>,
    uri: &Uri,
    credential: Option<&Credential>,
    message: Bytes,
    decode: impl Fn(&[u8]) -> Option<T>,
) -> Result<T, Failure> {
    let (reply, mut stream) = sender
        .send_request(request(uri, credential), false)
        .map_err(Failure::transport)?;
    stream
        .send_data(message, true)
        .map_err(Failure::transport)?;
    let reply = reply.await.map_err(Failure::transport)?;
    read_reply(reply, decode).await
}

/// A streaming call on `sender`'s connection, `first` sent on it.
async fn open_stream(
    mut sender: SendRequest<Bytes>,
    uri: &Uri,
    credential: Option<&Credential>,
    first: Bytes,
) -> Result<Stream, Failure> {
    let (reply, mut send) = sender
        .send_request(request(uri, credential), false)
        .map_err(Failure::transport)?;
    send.send_data(first, false).map_err(Failure::transport)?;
    let reply = reply.await.map_err(Failure::transport)?;
    let (head, recv) = reply.into_parts();
    match status_in(&head.headers) {
        None => Ok(Stream {
            send,
            recv,
            buffer: BytesMut::new(),
        }),
        Some(Code::OK) => Err(Failure::transport("the stream ended at once")),
        Some(code) => Err(failure(code, &head.headers)),
    }
}

/// A gRPC request's headers: POST, the path, the two headers gRPC
/// requires, and the credential if there is one.
fn request(uri: &Uri, credential: Option<&Credential>) -> Request<()> {
    let mut request = Request::new(());
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri.clone();
    let headers = request.headers_mut();
    headers.reserve(3);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(TE, HeaderValue::from_static("trailers"));
    if let Some(Credential { name, value }) = credential {
        headers.insert(name, value.clone());
    }
    request
}

/// A message as gRPC sends it: uncompressed (flag 0), its length (4 bytes,
/// big-endian), the message.
pub fn frame(message: &impl prost::Message) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    // Plan bounds keep messages far below 4 GB.
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    message
        .encode(&mut buf)
        .expect("a BytesMut grows as needed");
    buf.freeze()
}

/// A streaming call: messages go out on it while the server's come back.
pub struct Stream {
    send: h2::SendStream<Bytes>,
    recv: RecvStream,
    /// Bytes received that do not make a whole message yet.
    buffer: BytesMut,
}

impl Stream {
    /// Sends `message` (already framed), keeping the stream open.
    pub fn send(&mut self, message: Bytes) -> Result<(), Failure> {
        self.send
            .send_data(message, false)
            .map_err(Failure::transport)
    }

    /// The next whole message from the server; None once it ended the
    /// stream. A compressed or cut-off message is INTERNAL.
    pub async fn next(&mut self) -> Result<Option<Bytes>, Failure> {
        loop {
            if let Some(message) = take_message(&mut self.buffer)? {
                return Ok(Some(message));
            }
            match self.recv.data().await {
                Some(chunk) => {
                    let chunk = chunk.map_err(Failure::transport)?;
                    let _ = self.recv.flow_control().release_capacity(chunk.len());
                    self.buffer.extend_from_slice(&chunk);
                }
                None if self.buffer.is_empty() => return Ok(None),
                None => return Err(Failure::status(Code::INTERNAL)),
            }
        }
    }

    /// Ends the call from this side (RST_STREAM CANCEL, as a client that
    /// stops watching does).
    pub fn cancel(mut self) {
        self.send.send_reset(h2::Reason::CANCEL);
    }
}

/// The first whole length-prefixed message in `buffer`, taken out of it.
fn take_message(buffer: &mut BytesMut) -> Result<Option<Bytes>, Failure> {
    let Some(len) = message_len(buffer)? else {
        return Ok(None);
    };
    let _ = buffer.split_to(5);
    Ok(Some(buffer.split_to(len).freeze()))
}

/// The length of the first length-prefixed message in `bytes` (after its
/// 5-byte prefix); None while it is not whole. A compressed one is INTERNAL.
fn message_len(bytes: &[u8]) -> Result<Option<usize>, Failure> {
    let Some((&[flag, a, b, c, d], after)) = bytes.split_first_chunk::<5>() else {
        return Ok(None);
    };
    if flag != 0 {
        return Err(Failure::status(Code::INTERNAL));
    }
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    Ok((after.len() >= len).then_some(len))
}

/// The reply's status, checked in the order tonic checked it: a status in
/// the headers (a trailers-only reply), then the messages as they came, then
/// the status in the trailers (or one inferred from the HTTP status), and
/// last whether there was a message at all.
async fn read_reply<T>(
    reply: Response<RecvStream>,
    decode: impl Fn(&[u8]) -> Option<T>,
) -> Result<T, Failure> {
    let (head, mut body) = reply.into_parts();
    let trailers_only = match status_in(&head.headers) {
        Some(Code::OK) => true,
        Some(code) => return Err(failure(code, &head.headers)),
        None => false,
    };
    let data = read_body(&mut body).await?;
    let first = messages(&data, decode)?;
    if !trailers_only {
        let trailers = body.trailers().await.map_err(Failure::transport)?;
        match trailers.as_ref().map(|t| (status_in(t), t)) {
            Some((Some(Code::OK), _)) => {}
            Some((Some(code), trailers)) => return Err(failure(code, trailers)),
            _ => return Err(Failure::status(Code::from_http(head.status))),
        }
    }
    first.ok_or(Failure::status(Code::INTERNAL))
}

fn status_in(headers: &HeaderMap) -> Option<Code> {
    // A HeaderName, not a str: looking a str up parses it as a name first.
    const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
    headers
        .get(GRPC_STATUS)
        .map(|value| Code::parse(value.as_bytes()))
}

/// The failure of a call whose status is `code` (not OK), with the message
/// in `headers` (percent-encoded, as gRPC sends it).
fn failure(code: Code, headers: &HeaderMap) -> Failure {
    const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
    let message = headers
        .get(GRPC_MESSAGE)
        .map(|value| percent_decoded(value.as_bytes()))
        .unwrap_or_default();
    Failure::Status(code, message.into_boxed_str())
}

/// gRPC's percent-encoding undone ("%20" is a space); a "%" not followed
/// by two hex digits stays as it is, and bytes that are not UTF-8 are
/// replaced.
fn percent_decoded(text: &[u8]) -> String {
    let hex = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some((&byte, after)) = rest.split_first() {
        rest = after;
        if byte == b'%'
            && let [high, low, ..] = *rest
            && let (Some(high), Some(low)) = (hex(high), hex(low))
        {
            bytes.push(high << 4 | low);
            rest = &rest[2..];
            continue;
        }
        bytes.push(byte);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The whole body; a reply normally arrives in one DATA frame, kept as it is.
async fn read_body(body: &mut RecvStream) -> Result<Bytes, Failure> {
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(Failure::transport)?;
        // Hand the bytes back to the flow-control window, or it runs dry.
        let _ = body.flow_control().release_capacity(chunk.len());
        if chunk.is_empty() {
            continue;
        }
        if let Some(joined) = joined.as_mut() {
            joined.extend_from_slice(&chunk);
        } else if first.is_empty() {
            first = chunk;
        } else {
            let mut both = BytesMut::with_capacity(first.len() + chunk.len());
            both.extend_from_slice(&first);
            both.extend_from_slice(&chunk);
            joined = Some(both);
        }
    }
    Ok(joined.map_or(first, BytesMut::freeze))
}

/// Splits `body` into its length-prefixed messages and decodes each; the
/// first one's result, or None for a body without messages. A truncated or
/// compressed message (none was asked for), or one that does not decode,
/// makes the reply INTERNAL.
fn messages<T>(body: &[u8], decode: impl Fn(&[u8]) -> Option<T>) -> Result<Option<T>, Failure> {
    let malformed = Failure::status(Code::INTERNAL);
    let mut first = None;
    let mut rest = body;
    while !rest.is_empty() {
        // a message cut short is as malformed as a compressed one
        let Some(len) = message_len(rest)? else {
            return Err(malformed);
        };
        let (message, after) = rest[5..].split_at(len);
        let Some(decoded) = decode(message) else {
            return Err(malformed);
        };
        first.get_or_insert(decoded);
        rest = after;
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Messages of the shapes etcd's calls carry, defined here: the transport
    // sits below the protocols and knows none of them.
    #[derive(Clone, PartialEq, prost::Message)]
    struct PutRequest {
        #[prost(bytes = "bytes", tag = "1")]
        key: Bytes,
        #[prost(bytes = "bytes", tag = "2")]
        value: Bytes,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct RangeRequest {
        #[prost(bytes = "bytes", tag = "1")]
        key: Bytes,
        #[prost(bool, tag = "7")]
        serializable: bool,
        #[prost(bool, tag = "9")]
        count_only: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct StatusRequest {}

    fn framed(messages: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        for message in messages {
            body.push(0);
            body.extend_from_slice(&(message.len() as u32).to_be_bytes());
            body.extend_from_slice(message);
        }
        body
    }

    fn first(body: &[u8]) -> Result<Option<Vec<u8>>, Failure> {
        messages(body, |m| (m != b"bad").then(|| m.to_vec()))
    }

    #[test]
    fn a_stream_yields_whole_messages_as_they_complete() {
        let body = framed(&[b"one", b"", b"three"]);
        let mut buffer = BytesMut::new();
        let mut got = Vec::new();
        // byte by byte: a message comes out only once it is whole
        for byte in body {
            buffer.extend_from_slice(&[byte]);
            while let Some(message) = take_message(&mut buffer).unwrap() {
                got.push(message.to_vec());
            }
        }
        assert_eq!(got, [b"one".to_vec(), Vec::new(), b"three".to_vec()]);
        assert!(buffer.is_empty());
        let mut compressed = BytesMut::from(&[1u8, 0, 0, 0, 0][..]);
        assert!(matches!(
            take_message(&mut compressed),
            Err(Failure::Status(Code::INTERNAL, _))
        ));
    }

    #[test]
    fn status_codes_parse_as_tonic_parsed_them() {
        assert_eq!(Code::parse(b"0"), Code::OK);
        assert_eq!(Code::parse(b"14").name(), "UNAVAILABLE");
        assert_eq!(Code::parse(b"16").name(), "UNAUTHENTICATED");
        assert_eq!(Code::parse(b"8").name(), "RESOURCE_EXHAUSTED");
        for junk in [&b""[..], b"17", b"00", b"1a", b"-1", b"123"] {
            assert_eq!(Code::parse(junk), Code::UNKNOWN, "{junk:?}");
        }
        assert_eq!(Code::from_http(StatusCode::OK), Code::UNKNOWN);
        assert_eq!(Code::from_http(StatusCode::NOT_FOUND), Code::UNIMPLEMENTED);
        assert_eq!(
            Code::from_http(StatusCode::SERVICE_UNAVAILABLE),
            Code::UNAVAILABLE
        );
    }

    #[test]
    fn the_first_message_is_returned_and_every_one_checked() {
        assert_eq!(first(&framed(&[b"one"])).unwrap(), Some(b"one".to_vec()));
        assert_eq!(
            first(&framed(&[b"one", b"two"])).unwrap(),
            Some(b"one".to_vec())
        );
        assert_eq!(first(&framed(&[b""])).unwrap(), Some(Vec::new()));
        assert_eq!(first(b"").unwrap(), None);
        let internal = |r: Result<Option<Vec<u8>>, Failure>| {
            matches!(r, Err(Failure::Status(Code::INTERNAL, _)))
        };
        assert!(internal(first(&framed(&[b"bad"]))));
        assert!(internal(first(&framed(&[b"one", b"bad"]))));
        // Truncated: a partial prefix, or fewer bytes than the prefix says.
        assert!(internal(first(&framed(&[b"one"])[..3])));
        assert!(internal(first(&framed(&[b"one"])[..7])));
        // Compressed (flag 1) or an unknown flag.
        let mut compressed = framed(&[b"one"]);
        compressed[0] = 1;
        assert!(internal(first(&compressed)));
    }

    /// A stand-in gRPC server on loopback; the method's name says how it
    /// answers. "drop" closes the connection instead.
    async fn serve() -> (Endpoint, tokio::task::JoinHandle<()>) {
        let (endpoint, _, server) = serve_switchable().await;
        (endpoint, server)
    }

    /// What a switchable stand-in does with connections, and how many it took.
    #[derive(Default)]
    struct Switch {
        /// Off: every connection is closed as soon as it is accepted (a
        /// member that is down; a dial to it fails).
        off: std::sync::atomic::AtomicBool,
        accepted: std::sync::atomic::AtomicUsize,
    }

    async fn serve_switchable() -> (Endpoint, Arc<Switch>, tokio::task::JoinHandle<()>) {
        use std::sync::atomic::Ordering::SeqCst;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let switch = Arc::new(Switch::default());
        let state = switch.clone();
        let server = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                state.accepted.fetch_add(1, SeqCst);
                if state.off.load(SeqCst) {
                    drop(socket);
                    continue;
                }
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(socket).await.unwrap();
                    while let Some(Ok((request, respond))) = conn.accept().await {
                        let how = request.uri().path().trim_start_matches('/').to_owned();
                        if how == "drop" {
                            return; // drops the connection
                        }
                        tokio::spawn(answer(how, request.into_body(), respond));
                    }
                });
            }
        });
        let endpoint = crate::plan::parse_endpoint(&address.to_string()).unwrap();
        (endpoint, switch, server)
    }

    async fn answer(
        how: String,
        mut body: RecvStream,
        mut respond: h2::server::SendResponse<Bytes>,
    ) {
        // The reply echoes the request's message.
        let mut echo = Vec::new();
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
            echo.extend_from_slice(&chunk);
        }
        let status = |code: &'static str| {
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static(code));
            trailers
        };
        let head = |status: u16| http::Response::builder().status(status).body(()).unwrap();
        let half = Bytes::copy_from_slice(&echo[..4]);
        let echo = Bytes::from(echo);
        let mut stream = match how.as_str() {
            "trailers-only" => {
                let mut head = head(200);
                *head.headers_mut() = status("8");
                respond.send_response(head, true).unwrap();
                return;
            }
            "not-found" => {
                respond.send_response(head(404), true).unwrap();
                return;
            }
            _ => respond.send_response(head(200), false).unwrap(),
        };
        match how.as_str() {
            "ok" => {
                stream.send_data(echo, false).unwrap();
                stream.send_trailers(status("0")).unwrap();
            }
            "split" => {
                stream.send_data(half, false).unwrap();
                stream.send_data(echo.slice(4..), false).unwrap();
                stream.send_trailers(status("0")).unwrap();
            }
            "error-after-message" => {
                stream.send_data(echo, false).unwrap();
                stream.send_trailers(status("5")).unwrap();
            }
            "no-status" => stream.send_data(echo, true).unwrap(),
            "no-message" => stream.send_trailers(status("0")).unwrap(),
            _ => panic!("{how}"),
        }
    }

    fn echo(message: &[u8]) -> Option<Vec<u8>> {
        Some(message.to_vec())
    }

    #[tokio::test]
    async fn calls_read_statuses_as_grpc_defines_them() {
        let (endpoint, server) = serve().await;
        let conn = Conn::open(vec![endpoint], Duration::from_secs(1), None)
            .await
            .unwrap();
        let message = frame(&RangeRequest {
            key: Bytes::from_static(b"key"),
            serializable: true,
            count_only: false,
        });
        let call = |how: &'static str| {
            let (conn, message) = (&conn, message.clone());
            async move { conn.unary(&conn.uri(how), message, echo).await }
        };
        let status = |reply: Result<Vec<u8>, Failure>| match reply {
            Ok(_) => "ok",
            Err(Failure::Status(code, _)) => code.name(),
            Err(Failure::Transport(e)) => panic!("{e}"),
        };
        assert_eq!(call("/ok").await.unwrap(), &message[5..]);
        assert_eq!(call("/split").await.unwrap(), &message[5..]);
        assert_eq!(status(call("/trailers-only").await), "RESOURCE_EXHAUSTED");
        assert_eq!(status(call("/error-after-message").await), "NOT_FOUND");
        assert_eq!(status(call("/not-found").await), "UNIMPLEMENTED");
        assert_eq!(status(call("/no-status").await), "UNKNOWN");
        assert_eq!(status(call("/no-message").await), "INTERNAL");
        let garbled = conn
            .unary(&conn.uri("/ok"), message.clone(), |_| None::<()>)
            .await;
        assert!(matches!(garbled, Err(Failure::Status(Code::INTERNAL, _))));
        server.abort();
    }

    /// Calls in flight together share one connection's writes (coalesce.rs):
    /// each still gets its own reply, and a message larger than the socket
    /// takes at once (and than the unsent limit) goes through whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_and_large_calls_get_their_own_replies() {
        let (endpoint, server) = serve().await;
        let conn = Conn::open(vec![endpoint], Duration::from_secs(1), None)
            .await
            .unwrap();
        many_calls_and_a_large_one(&conn, 200).await;
        server.abort();
    }

    /// `count` calls at once and one of 3 MB on `conn`, each answered with
    /// its own message (the test server echoes "/ok").
    async fn many_calls_and_a_large_one(conn: &Conn, count: u32) {
        let uri = conn.uri("/ok");
        let calls = (0..count).map(|i| {
            let message = frame(&PutRequest {
                key: Bytes::from(format!("key-{i}")),
                value: Bytes::from(vec![b'v'; 300 + i as usize]),
            });
            let uri = &uri;
            async move {
                let reply = conn.unary(uri, message.clone(), echo).await.unwrap();
                assert_eq!(reply, &message[5..]);
            }
        });
        futures_util::future::join_all(calls).await;
        let large = frame(&PutRequest {
            key: Bytes::from_static(b"large"),
            value: Bytes::from(vec![b'v'; 3 << 20]),
        });
        let reply = conn.unary(&uri, large.clone(), echo).await.unwrap();
        assert!(reply == large[5..]);
    }

    #[tokio::test]
    async fn a_lost_connection_is_redialled_by_the_next_call() {
        let (endpoint, server) = serve().await;
        let conn = Conn::open(vec![endpoint], Duration::from_secs(1), None)
            .await
            .unwrap();
        let message = frame(&StatusRequest {});
        let call = |how: &'static str| {
            let (conn, message) = (&conn, message.clone());
            async move { conn.unary(&conn.uri(how), message, echo).await }
        };
        assert!(call("/ok").await.is_ok());
        // The call the connection dies under gets no reply...
        assert!(matches!(call("/drop").await, Err(Failure::Transport(_))));
        // ...the next one gets a new connection.
        assert!(call("/ok").await.is_ok());
        assert_eq!(conn.current().0, 1);
        // With no server at all, a call fails as a transport failure, and
        // so do the ones after it (dialling again after the backoff).
        server.abort();
        let _ = call("/drop").await;
        for _ in 0..2 {
            assert!(matches!(call("/ok").await, Err(Failure::Transport(_))));
        }
    }

    /// An endpoint nothing listens on (connections to it are refused).
    async fn refusing() -> Endpoint {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        crate::plan::parse_endpoint(&address.to_string()).unwrap()
    }

    #[tokio::test]
    async fn a_connection_moves_to_the_next_endpoint_and_back_home() {
        use std::sync::atomic::Ordering::SeqCst;
        let message = frame(&StatusRequest {});
        // Its own endpoint refuses from the start: it opens on the next one.
        let (second, _, second_server) = serve_switchable().await;
        let conn = Conn::open(
            vec![refusing().await, second.clone()],
            Duration::from_secs(1),
            None,
        )
        .await
        .unwrap();
        assert_eq!(conn.at(), 1);
        assert!(
            conn.unary(&conn.uri("/ok"), message.clone(), echo)
                .await
                .is_ok()
        );

        // Its own endpoint dies under it: the next call goes to the second.
        let (home, switch, home_server) = serve_switchable().await;
        let conn = Conn::open(vec![home, second], Duration::from_secs(1), None)
            .await
            .unwrap();
        let call = |how: &'static str| {
            let (conn, message) = (&conn, message.clone());
            async move { conn.unary(&conn.uri(how), message, echo).await }
        };
        assert!(call("/ok").await.is_ok());
        assert_eq!(conn.at(), 0);
        switch.off.store(true, SeqCst);
        assert!(matches!(call("/drop").await, Err(Failure::Transport(_))));
        assert!(call("/ok").await.is_ok());
        assert_eq!(conn.at(), 1);

        // Home accepts again: within HOME_RETRY (and a dial) it is back there,
        // and calls go on succeeding meanwhile.
        let back = Instant::now();
        switch.off.store(false, SeqCst);
        while conn.at() != 0 {
            assert!(call("/ok").await.is_ok());
            assert!(back.elapsed() < Duration::from_secs(3), "not back home");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let accepted = switch.accepted.load(SeqCst);
        assert!(call("/ok").await.is_ok());
        assert_eq!(
            switch.accepted.load(SeqCst),
            accepted,
            "calls on the home connection"
        );
        home_server.abort();
        second_server.abort();
    }

    #[tokio::test]
    async fn when_no_endpoint_accepts_calls_fail_without_dialling_during_the_backoff() {
        use std::sync::atomic::Ordering::SeqCst;
        let (first, one, first_server) = serve_switchable().await;
        let (second, two, second_server) = serve_switchable().await;
        let conn = Conn::open(vec![first, second], Duration::from_secs(1), None)
            .await
            .unwrap();
        let message = frame(&StatusRequest {});
        let call = |how: &'static str| {
            let (conn, message) = (&conn, message.clone());
            async move { conn.unary(&conn.uri(how), message, echo).await }
        };
        assert!(call("/ok").await.is_ok());
        one.off.store(true, SeqCst);
        two.off.store(true, SeqCst);
        assert!(call("/drop").await.is_err());
        let dials = || one.accepted.load(SeqCst) + two.accepted.load(SeqCst);
        let before = dials();
        // The first call after the loss dials both and fails...
        assert!(matches!(call("/ok").await, Err(Failure::Transport(_))));
        assert_eq!(dials(), before + 2);
        // ...and the calls during the backoff (50 ms) fail without a dial.
        let started = Instant::now();
        for _ in 0..100 {
            assert!(matches!(call("/ok").await, Err(Failure::Transport(_))));
        }
        if started.elapsed() < Duration::from_millis(40) {
            assert_eq!(dials(), before + 2);
        }
        // After it, a call dials again; once an endpoint accepts, calls succeed.
        tokio::time::sleep(Duration::from_millis(60)).await;
        two.off.store(false, SeqCst);
        assert!(call("/ok").await.is_ok());
        assert_eq!(conn.at(), 1);
        first_server.abort();
        second_server.abort();
    }

    /// The stand-in's logins: the one token it takes now, and how many it gave.
    #[derive(Default)]
    struct Tokens {
        valid: Mutex<Option<String>>,
        logins: std::sync::atomic::AtomicUsize,
    }

    impl Tokens {
        fn logins(&self) -> usize {
            self.logins.load(std::sync::atomic::Ordering::SeqCst)
        }

        /// Forgets the token it gave (one expired; the server restarted).
        fn forget(&self) {
            *self.valid.lock().unwrap() = None;
        }
    }

    /// A stand-in gRPC server on loopback, over TLS with `tls` (None: TCP),
    /// answering as `serve`'s does and besides: "login" (the message is a
    /// password; "secret" gets a new token), "need-token" (an echo for a
    /// call carrying the current token, else UNAUTHENTICATED) and "scheme"
    /// (the request URI's scheme).
    async fn serve_secure(
        tls: Option<Arc<rustls::ServerConfig>>,
        tokens: Arc<Tokens>,
    ) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (tls, tokens) = (tls.clone(), tokens.clone());
                tokio::spawn(async move {
                    let Some(config) = tls else {
                        return serve_h2(socket, tokens).await;
                    };
                    // A client that does not trust it ends the handshake.
                    let accepted = tokio_rustls::TlsAcceptor::from(config).accept(socket);
                    if let Ok(stream) = accepted.await {
                        serve_h2(stream, tokens).await;
                    }
                });
            }
        });
        (address, server)
    }

    async fn serve_h2<S: AsyncRead + AsyncWrite + Unpin>(io: S, tokens: Arc<Tokens>) {
        let Ok(mut conn) = h2::server::handshake(io).await else {
            return;
        };
        while let Some(Ok((request, respond))) = conn.accept().await {
            let how = request.uri().path().trim_start_matches('/').to_owned();
            match how.as_str() {
                "drop" => return,
                "login" | "need-token" | "scheme" => {
                    tokio::spawn(guarded(how, request, respond, tokens.clone()));
                }
                _ => {
                    tokio::spawn(answer(how, request.into_body(), respond));
                }
            }
        }
    }

    async fn guarded(
        how: String,
        request: Request<RecvStream>,
        mut respond: h2::server::SendResponse<Bytes>,
        tokens: Arc<Tokens>,
    ) {
        let status = |code: &'static str, text: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert("grpc-status", HeaderValue::from_static(code));
            headers.insert("grpc-message", HeaderValue::from_static(text));
            headers
        };
        let (head, mut body) = request.into_parts();
        let mut reply = http::Response::builder().status(200).body(()).unwrap();
        let valid = tokens.valid.lock().unwrap().clone();
        let carried = head.headers.get("token").map(|t| t.to_str().unwrap());
        if how == "need-token" && (valid.is_none() || carried != valid.as_deref()) {
            *reply.headers_mut() = status("16", "etcdserver: invalid auth token");
            respond.send_response(reply, true).unwrap();
            return;
        }
        // Headers first: a streaming call (its request not ended) has them at once.
        let mut stream = respond.send_response(reply, false).unwrap();
        let mut message = Vec::new();
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
            message.extend_from_slice(&chunk);
        }
        let answer = match how.as_str() {
            "login" if message[5..] == *b"secret" => {
                let n = tokens
                    .logins
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let token = format!("token-{n}");
                *tokens.valid.lock().unwrap() = Some(token.clone());
                token.into_bytes()
            }
            "login" => {
                // As etcd answers a wrong password (the message percent-encoded).
                let refused = "etcdserver: authentication failed%2C wrong password";
                stream.send_trailers(status("3", refused)).unwrap();
                return;
            }
            "need-token" => message[5..].to_vec(),
            _ => head
                .uri
                .scheme_str()
                .unwrap_or_default()
                .as_bytes()
                .to_vec(),
        };
        stream
            .send_data(Bytes::from(framed(&[&answer])), false)
            .unwrap();
        stream.send_trailers(status("0", "")).unwrap();
    }

    /// Logs in with "login" and a password, as etcd's Authenticate does.
    struct Password(&'static str);

    impl Login for Password {
        fn log_in<'a>(
            &'a self,
            calls: &'a Caller,
        ) -> Pin<Box<dyn Future<Output = Result<Credential, BoxError>> + Send + 'a>> {
            Box::pin(async move {
                let message = Bytes::from(framed(&[self.0.as_bytes()]));
                let token = calls
                    .unary("/login", message, |m| String::from_utf8(m.to_vec()).ok())
                    .await
                    .map_err(|failure| match failure {
                        Failure::Status(code, message) => format!("{}: {message}", code.name()),
                        Failure::Transport(e) => e.to_string(),
                    })?;
                let token = HeaderValue::from_str(&token)?;
                Ok(Credential::new(HeaderName::from_static("token"), token))
            })
        }

        fn expired(&self, failure: &Failure) -> bool {
            matches!(failure, Failure::Status(code, _) if *code == Code::UNAUTHENTICATED)
        }
    }

    fn text(message: &[u8]) -> Option<String> {
        String::from_utf8(message.to_vec()).ok()
    }

    fn plain(address: std::net::SocketAddr) -> Endpoint {
        crate::plan::parse_endpoint(&address.to_string()).unwrap()
    }

    /// Over TLS (h2 by ALPN) calls work as over TCP, their URIs https; many
    /// at once and a large one go through the coalesced writes whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_go_over_tls() {
        use crate::plan::pki::{Pki, endpoint};
        let pki = Pki::new();
        let (address, server) =
            serve_secure(Some(pki.server(tls::H2, false)), Arc::default()).await;
        let endpoint = endpoint(address, pki.plan(&pki.ca, false));
        let conn = Conn::open(vec![endpoint], Duration::from_secs(1), None)
            .await
            .unwrap();
        let scheme = conn.uri("/scheme");
        let scheme = conn.unary(&scheme, frame(&StatusRequest {}), text).await;
        assert_eq!(scheme.unwrap(), "https");
        many_calls_and_a_large_one(&conn, 50).await;
        server.abort();
    }

    /// A server the CA does not vouch for, or whose certificate names
    /// another host, is refused, and the error says why.
    #[tokio::test]
    async fn a_server_the_plan_does_not_trust_is_refused() {
        use crate::plan::pki::{Pki, endpoint};
        use crate::plan::tests::{dict, s};
        let pki = Pki::new();
        let (address, server) =
            serve_secure(Some(pki.server(tls::H2, false)), Arc::default()).await;
        let open = |tls| async move {
            let endpoint = endpoint(address, tls);
            match Conn::open(vec![endpoint], Duration::from_secs(1), None).await {
                Ok(_) => panic!("connected to a server it must not trust"),
                Err(error) => crate::outcome::chain(error.as_ref()),
            }
        };
        let error = open(pki.plan(&pki.other_ca, false)).await;
        assert!(
            error.contains("invalid peer certificate") && error.contains("UnknownIssuer"),
            "{error}"
        );
        let elsewhere = dict(&[("ca", s(&pki.ca)), ("server_name", s("db.example"))]);
        let error = open(elsewhere).await;
        assert!(error.contains("not valid for name"), "{error}");
        server.abort();
    }

    /// A server that requires a client certificate takes the plan's, and
    /// refuses a client without one.
    #[tokio::test]
    async fn mutual_tls() {
        use crate::plan::pki::{Pki, endpoint};
        let pki = Pki::new();
        let (address, server) = serve_secure(Some(pki.server(tls::H2, true)), Arc::default()).await;
        let with_cert = endpoint(address, pki.plan(&pki.ca, true));
        let conn = Conn::open(vec![with_cert], Duration::from_secs(1), None)
            .await
            .unwrap();
        let uri = conn.uri("/ok");
        assert!(
            conn.unary(&uri, frame(&StatusRequest {}), echo)
                .await
                .is_ok()
        );
        let without = endpoint(address, pki.plan(&pki.ca, false));
        let refused = Conn::open(vec![without], Duration::from_secs(1), None).await;
        // The server's alert is lost behind the broken pipe its closing
        // caused (h2 sees the failed write first).
        assert!(refused.is_err());
        server.abort();
    }

    /// Each new connection logs in; a call refused for its credential logs
    /// in again (once for all the calls refused together) and is made once
    /// more; a redialled connection logs in anew.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_login_on_every_connection_and_again_when_refused() {
        let tokens = Arc::new(Tokens::default());
        let (address, server) = serve_secure(None, tokens.clone()).await;
        let login: Arc<dyn Login> = Arc::new(Password("secret"));
        let conn = Conn::open(vec![plain(address)], Duration::from_secs(1), Some(login))
            .await
            .unwrap();
        assert_eq!(tokens.logins(), 1);
        let message = frame(&StatusRequest {});
        let call = |how: &'static str| {
            let (conn, message) = (&conn, message.clone());
            async move { conn.unary(&conn.uri(how), message, echo).await }
        };
        assert!(call("/need-token").await.is_ok());
        tokens.forget();
        assert!(call("/need-token").await.is_ok());
        assert_eq!(tokens.logins(), 2);
        tokens.forget();
        let calls = (0..20).map(|_| call("/need-token"));
        for reply in futures_util::future::join_all(calls).await {
            assert!(reply.is_ok());
        }
        assert_eq!(tokens.logins(), 3);
        // A stream refused at once is opened again after a login too.
        tokens.forget();
        assert!(
            conn.stream(&conn.uri("/need-token"), message.clone())
                .await
                .is_ok()
        );
        assert_eq!(tokens.logins(), 4);
        assert!(matches!(call("/drop").await, Err(Failure::Transport(_))));
        assert!(call("/need-token").await.is_ok());
        assert_eq!(tokens.logins(), 5);
        server.abort();
    }

    #[tokio::test]
    async fn a_refused_login_fails_the_open_with_the_servers_reason() {
        let (address, server) = serve_secure(None, Arc::default()).await;
        let login: Arc<dyn Login> = Arc::new(Password("wrong"));
        let opened = Conn::open(vec![plain(address)], Duration::from_secs(1), Some(login)).await;
        let error = crate::outcome::chain(opened.err().unwrap().as_ref());
        assert_eq!(
            error,
            "INVALID_ARGUMENT: etcdserver: authentication failed, wrong password"
        );
        server.abort();
    }

    #[test]
    fn messages_are_percent_decoded() {
        assert_eq!(percent_decoded(b"a%20b%2Cc"), "a b,c");
        assert_eq!(percent_decoded(b"100%"), "100%");
        assert_eq!(percent_decoded(b"%zz%4"), "%zz%4");
        assert_eq!(percent_decoded(b"%C3%A9"), "\u{e9}");
        assert_eq!(percent_decoded(b"%FF"), "\u{fffd}");
    }

    #[test]
    fn requests_carry_what_grpc_requires() {
        let uri: Uri = "http://127.0.0.1:2379/etcdserverpb.KV/Range"
            .parse()
            .unwrap();
        let request = request(&uri, None);
        assert_eq!(request.method(), Method::POST);
        assert_eq!(request.uri(), &uri);
        assert_eq!(request.headers()[CONTENT_TYPE], "application/grpc");
        assert_eq!(request.headers()[TE], "trailers");
        assert_eq!(request.headers().len(), 2);
        let token = HeaderValue::from_static("t0k3n");
        let credential = Credential::new(HeaderName::from_static("token"), token);
        assert_eq!(
            format!("{credential:?}"),
            r#"Credential { name: "token", .. }"#
        );
        let request = super::request(&uri, Some(&credential));
        assert_eq!(request.headers()["token"], "t0k3n");
        assert!(request.headers()["token"].is_sensitive());
        let framed = frame(&RangeRequest {
            key: Bytes::from_static(b"k"),
            serializable: true,
            count_only: false,
        });
        assert_eq!(&framed[..], b"\0\0\0\0\x05\x0a\x01k\x38\x01");
    }
}
