//! HTTP/1.1 keep-alive connections to a cluster (Consul's API): one request
//! at a time per connection, its callers queueing first come, first served
//! (tokio's Mutex is fair), and the failover of failover.rs: its own endpoint
//! first, on to the next when one does not accept, back home once home
//! accepts again. Over TLS when the endpoints carry it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::outcome::{Outcome, chain};
use crate::plan::Endpoint;
use crate::transport::failover::{self, Backoff, Homing};
use crate::transport::tls;

/// A live HTTP/1.1 connection: the request side and the task driving its socket.
pub struct Link {
    sender: SendRequest<Full<Bytes>>,
    driver: JoinHandle<()>,
    /// Set while a request is on the wire. A caller that gave up midway (its
    /// timeout) leaves it set, and the next caller starts a fresh connection
    /// rather than inherit a reply it cannot tell from its own.
    busy: bool,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.driver.abort(); // closes the socket now, not when the task notices
    }
}

/// One HTTP/1.1 connection to the cluster, through its endpoints as
/// failover.rs describes: its own first, on to the next when one does not
/// accept, back home once home accepts again.
pub struct Conn {
    /// Its own endpoint first, then the others (failover::ordered).
    endpoints: Vec<Endpoint>,
    /// The own endpoint's, wherever requests go (Consul does not check it).
    pub host: HeaderValue,
    /// Sent with every request besides its own (Consul's token).
    headers: HeaderMap,
    dial_timeout: Duration,
    state: Mutex<State>,
}

struct State {
    /// None: the last connection failed; the next request reconnects.
    link: Option<Link>,
    /// The endpoint it is (or was last) on: an index into `endpoints`.
    at: usize,
    backoff: Backoff,
    /// What the last dial through every endpoint ended in: the outcome of
    /// requests during the backoff after it.
    refused: Outcome,
    /// Whether a task is trying to go back home (one at a time).
    homing: bool,
    /// Dials made (the backoff test counts them).
    #[cfg(test)]
    dials: usize,
}

/// Every endpoint failed: the outcome requests get, and why (for messages).
pub struct DialFailure {
    pub outcome: Outcome,
    pub text: String,
}

impl Conn {
    /// A connection on the first endpoint from the current one on that
    /// accepts; while the backoff after none did lasts, none is dialled.
    async fn reconnect(self: &Arc<Conn>, state: &mut State) -> Result<(), DialFailure> {
        if state.backoff.waiting(Instant::now()) {
            return Err(DialFailure {
                outcome: state.refused.clone(),
                text: "no endpoint accepted a connection (backing off)".into(),
            });
        }
        let n = self.endpoints.len();
        let mut errors = Vec::new();
        let mut outcome = Outcome::ConnectionError;
        for i in 0..n {
            let at = (state.at + i) % n;
            let endpoint = &self.endpoints[at];
            #[cfg(test)]
            {
                state.dials += 1;
            }
            match tokio::time::timeout(self.dial_timeout, connect(endpoint)).await {
                Ok(Ok(link)) => {
                    state.link = Some(link);
                    state.at = at;
                    state.backoff.succeeded();
                    if at != 0 && !state.homing {
                        state.homing = true;
                        tokio::spawn(failover::go_home(Arc::downgrade(self)));
                    }
                    return Ok(());
                }
                Ok(Err(e)) => {
                    outcome = e.outcome();
                    errors.push((endpoint.authority.clone(), e.to_string()));
                }
                Err(_) => {
                    // Not "timeout": that names a request with no reply in time.
                    outcome = Outcome::ConnectionError;
                    let text = format!(
                        "no connection within {:.3} s",
                        self.dial_timeout.as_secs_f64()
                    );
                    errors.push((endpoint.authority.clone(), text));
                }
            }
        }
        state.backoff.failed(Instant::now());
        state.refused = outcome.clone();
        Err(DialFailure {
            outcome,
            text: failover::none_accepted(&errors),
        })
    }
}

impl Conn {
    /// A connection to the cluster through `endpoints` (its own first),
    /// connected to the first that accepts; `host` names the own endpoint,
    /// and every request carries `headers` too.
    pub async fn open(
        endpoints: Vec<Endpoint>,
        host: HeaderValue,
        headers: HeaderMap,
        dial_timeout: Duration,
    ) -> Result<Arc<Conn>, DialFailure> {
        let conn = Arc::new(Conn {
            endpoints,
            host,
            headers,
            dial_timeout,
            state: Mutex::new(State {
                link: None,
                at: 0,
                backoff: Backoff::default(),
                refused: Outcome::ConnectionError,
                homing: false,
                #[cfg(test)]
                dials: 0,
            }),
        });
        {
            let mut state = conn.state.lock().await;
            conn.reconnect(&mut state).await?;
        }
        Ok(conn)
    }

    /// Sends `request` when its turn comes, reconnecting first if the last
    /// connection failed; the reply's status and body, or the outcome of
    /// the failure. `sent` is set when the request goes out.
    pub async fn send(
        self: &Arc<Conn>,
        request: Request<Full<Bytes>>,
        sent: &mut Instant,
    ) -> Result<(StatusCode, Bytes), Outcome> {
        let (head, body) = self.exchange(request, sent).await?;
        Ok((head.status, body))
    }

    /// `send`, with the reply's whole head (its headers too).
    pub async fn exchange(
        self: &Arc<Conn>,
        mut request: Request<Full<Bytes>>,
        sent: &mut Instant,
    ) -> Result<(http::response::Parts, Bytes), Outcome> {
        for (name, value) in &self.headers {
            request.headers_mut().insert(name, value.clone());
        }
        let mut guard = self.state.lock().await; // first come, first served
        let state = &mut *guard;
        let usable = |link: &Link| !link.busy && !link.sender.is_closed();
        if !state.link.as_ref().is_some_and(usable) {
            // The last connection failed: reconnect as part of this request.
            state.link = None;
            self.reconnect(state).await.map_err(|e| e.outcome)?;
        }
        let slot = &mut state.link;
        let Some(link) = slot.as_mut() else {
            return Err(Outcome::ConnectionError); // unreachable: reconnect left one
        };
        if let Err(e) = link.sender.ready().await {
            *slot = None;
            return Err(Outcome::from_transport(&e));
        }
        *sent = Instant::now();
        link.busy = true;
        let reply = match link.sender.send_request(request).await {
            Ok(reply) => reply,
            Err(e) => {
                *slot = None;
                return Err(Outcome::from_transport(&e));
            }
        };
        let (head, body) = reply.into_parts();
        let body = match body.collect().await {
            Ok(body) => body.to_bytes(),
            Err(e) => {
                *slot = None;
                return Err(Outcome::from_transport(&e));
            }
        };
        link.busy = false;
        drop(guard); // the next client in line may send now
        Ok((head, body))
    }

    /// The endpoint the connection is on now (or was last on).
    pub async fn endpoint(&self) -> Endpoint {
        let at = self.state.lock().await.at;
        self.endpoints[at].clone()
    }

    /// Which endpoint (index into its list) the connection is on now.
    #[cfg(test)]
    pub async fn at(&self) -> usize {
        self.state.lock().await.at
    }

    /// Dials made so far.
    #[cfg(test)]
    pub async fn dials(&self) -> usize {
        self.state.lock().await.dials
    }
}

impl Homing for Conn {
    type Link = Link;
    type Home = Endpoint;

    async fn away(&self) -> Option<(Endpoint, Duration)> {
        let mut state = self.state.lock().await;
        if state.at == 0 {
            state.homing = false; // a reconnect wrapped round to it
            return None;
        }
        Some((self.endpoints[0].clone(), self.dial_timeout))
    }

    async fn dial(endpoint: &Endpoint) -> Option<Link> {
        connect(endpoint).await.ok()
    }

    /// Between requests: it waits its turn for the connection.
    async fn arrive(&self, link: Link) {
        let mut state = self.state.lock().await;
        if state.at != 0 {
            state.link = Some(link); // the old one closes as it is dropped
            state.at = 0;
            state.backoff.succeeded();
        }
        state.homing = false;
    }
}

enum ConnectError {
    Io(std::io::Error),
    Http(hyper::Error),
}

impl ConnectError {
    fn outcome(&self) -> Outcome {
        match self {
            ConnectError::Io(e) => Outcome::from_io(e),
            ConnectError::Http(e) => Outcome::from_transport(e),
        }
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Io(e) => write!(f, "{e}"),
            ConnectError::Http(e) => f.write_str(&chain(e)),
        }
    }
}

/// A TCP connection with Nagle off, TLS on it when the endpoint has it, and
/// HTTP/1.1 on that.
async fn connect(endpoint: &Endpoint) -> Result<Link, ConnectError> {
    let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(ConnectError::Io)?;
    tcp.set_nodelay(true).map_err(ConnectError::Io)?;
    match &endpoint.tls {
        None => handshake(tcp).await,
        Some(config) => {
            let stream = tls::handshake(config, tcp, tls::HTTP1)
                .await
                .map_err(ConnectError::Io)?;
            handshake(stream).await
        }
    }
}

async fn handshake<S>(stream: S) -> Result<Link, ConnectError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(ConnectError::Http)?;
    let driver = tokio::spawn(async move {
        // Its error reaches the sender's next request; nothing to do here.
        let _ = connection.await;
    });
    Ok(Link {
        sender,
        driver,
        busy: false,
    })
}
