//! Consul's KV API over HTTP/1.1 keep-alive: one TCP connection per
//! connection. HTTP/1.1 cannot multiplex, so a connection serves one request at
//! a time and its clients queue for it first come, first served (tokio's
//! Mutex is fair); that wait is part of the latency, not of the service time.

use std::time::Instant;

use bytes::Bytes;
use futures_util::future::try_join_all;
use http::header::{CONTENT_LENGTH, HOST};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::outcome::{EngineError, Outcome, chain};
use crate::plan::{Consistency, Endpoint, Operation, Plan, Step};
use crate::protocol::{Protocol, endpoint_for, within};

const ROOT: &str = "/v1/kv/dbtester/";

/// A live HTTP/1.1 connection: the request side and the task driving its socket.
struct Link {
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

struct Conn {
    endpoint: Endpoint,
    host: HeaderValue,
    link: Mutex<Option<Link>>,
}

pub struct Consul {
    conns: Vec<Conn>,
    value: Bytes,
    read: bool,
    query: &'static str,
}

impl Protocol for Consul {
    async fn open(plan: &Plan, step: &Step) -> Result<Self, EngineError> {
        let conns = try_join_all((0..step.connections).map(|c| async move {
            let endpoint = endpoint_for(plan, c).clone();
            let what = || format!("cannot connect to consul at {}", endpoint.authority);
            let host = HeaderValue::from_str(&endpoint.authority)
                .map_err(|e| EngineError(format!("{}: {e}", what())))?;
            let link = within(plan.timeout, what, async {
                let mut link = connect(&endpoint)
                    .await
                    .map_err(|e| EngineError(format!("{}: {}", what(), e)))?;
                probe(&mut link, &host)
                    .await
                    .map_err(|e| EngineError(format!("{}: {}", what(), e)))?;
                Ok(link)
            })
            .await?;
            Ok::<_, EngineError>(Conn {
                endpoint,
                host,
                link: Mutex::new(Some(link)),
            })
        }))
        .await?;
        Ok(Consul {
            conns,
            value: Bytes::from(plan.value()),
            read: plan.operation == Operation::Read,
            query: match plan.consistency {
                Consistency::Linearizable => "?raw&consistent",
                Consistency::Serializable => "?raw&stale",
            },
        })
    }

    async fn request(&self, conn: usize, key: &[u8], sent: &mut Instant) -> Outcome {
        let conn = &self.conns[conn];
        let key = std::str::from_utf8(key).unwrap_or_default();
        let request = if self.read {
            Request::builder()
                .method(Method::GET)
                .uri(format!("{ROOT}{key}{}", self.query))
                .header(HOST, conn.host.clone())
                .body(Full::new(Bytes::new()))
        } else {
            Request::builder()
                .method(Method::PUT)
                .uri(format!("{ROOT}{key}"))
                .header(HOST, conn.host.clone())
                .header(CONTENT_LENGTH, self.value.len())
                .body(Full::new(self.value.clone()))
        };
        let Ok(request) = request else {
            return Outcome::Named("bad-request"); // unreachable: keys are "k" and digits
        };

        let mut slot = conn.link.lock().await; // first come, first served
        let link = match slot.take() {
            Some(link) if !link.busy && !link.sender.is_closed() => slot.insert(link),
            // None: the last connection failed; reconnect as part of this request.
            _ => match connect(&conn.endpoint).await {
                Ok(link) => slot.insert(link),
                Err(e) => return e.outcome(),
            },
        };
        if let Err(e) = link.sender.ready().await {
            *slot = None;
            return Outcome::from_transport(&e);
        }
        *sent = Instant::now();
        link.busy = true;
        let reply = match link.sender.send_request(request).await {
            Ok(reply) => reply,
            Err(e) => {
                *slot = None;
                return Outcome::from_transport(&e);
            }
        };
        let status = reply.status();
        let body = match reply.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(e) => {
                *slot = None;
                return Outcome::from_transport(&e);
            }
        };
        link.busy = false;
        drop(slot); // the next client in line may send now
        check(self.read, status, &body, &self.value)
    }

    async fn close(self) {
        // Dropping each Link aborts its driver, closing the socket.
        drop(self.conns);
    }
}

fn check(read: bool, status: StatusCode, body: &[u8], value: &[u8]) -> Outcome {
    if status != StatusCode::OK {
        Outcome::Http(status.as_u16())
    } else if read {
        if body == value {
            Outcome::Ok
        } else {
            Outcome::WrongValue
        }
    } else if body.trim_ascii() == b"true" {
        Outcome::Ok
    } else {
        // Consul answers "false" when it declined the write.
        Outcome::Named("write-refused")
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

/// An accepted TCP connection proves little: one cheap call (who leads)
/// shows a Consul answers on it before the step counts on it.
async fn probe(link: &mut Link, host: &HeaderValue) -> Result<(), String> {
    let request = Request::builder()
        .method(Method::GET)
        .uri("/v1/status/leader")
        .header(HOST, host.clone())
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    link.sender.ready().await.map_err(|e| chain(&e))?;
    let reply = link
        .sender
        .send_request(request)
        .await
        .map_err(|e| chain(&e))?;
    let status = reply.status();
    // Read the body so the connection is free for the next request.
    reply.into_body().collect().await.map_err(|e| chain(&e))?;
    if status == StatusCode::OK {
        Ok(())
    } else {
        Err(format!(
            "GET /v1/status/leader answered HTTP {}",
            status.as_u16()
        ))
    }
}

async fn connect(endpoint: &Endpoint) -> Result<Link, ConnectError> {
    let stream = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(ConnectError::Io)?;
    stream.set_nodelay(true).map_err(ConnectError::Io)?;
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio::net::TcpListener;

    use super::*;
    use crate::plan::Protocol as Kind;

    /// A minimal HTTP/1.1 keep-alive server answering every request "true".
    /// (Consul itself is exercised live; this isolates the client's queueing.)
    async fn serve_true() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let (read, mut write) = socket.into_split();
                    let mut read = BufReader::new(read);
                    let mut line = String::new();
                    loop {
                        let mut length = 0;
                        loop {
                            line.clear();
                            if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            if let Some(v) =
                                line.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                length = v.trim().parse().unwrap();
                            }
                        }
                        let mut body = vec![0; length];
                        read.read_exact(&mut body).await.unwrap();
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\ntrue";
                        if write.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clients_sharing_a_connection_take_turns() {
        let addr = serve_true().await;
        let mut plan = crate::plan::tests::good_plan();
        plan.protocol = Kind::Consul;
        plan.endpoints = vec![crate::plan::parse_endpoint(&addr.to_string()).unwrap()];
        let step = Step {
            clients: 100,
            connections: 10,
            requests: 0,
            rate: 0.0,
        };
        let consul = Arc::new(Consul::open(&plan, &step).await.unwrap());
        let until = Instant::now() + Duration::from_millis(500);
        // Everyone lines up first: the first client spawned must not get a
        // head start alone on its connection.
        let start = Arc::new(tokio::sync::Barrier::new(step.clients));
        let mut clients = Vec::new();
        for client in 0..step.clients {
            let consul = consul.clone();
            let start = start.clone();
            clients.push(tokio::spawn(async move {
                start.wait().await;
                let mut done = 0u32;
                while Instant::now() < until {
                    let mut sent = Instant::now();
                    let outcome = consul.request(client % 10, b"k0000001", &mut sent).await;
                    assert_eq!(outcome, Outcome::Ok);
                    done += 1;
                }
                done
            }));
        }
        let mut done = Vec::new();
        for client in clients {
            done.push(client.await.unwrap());
        }
        // First come, first served: each client of a connection gets one turn
        // per round, so none falls behind the others on its connection by
        // more than the round in progress when time ran out (plus one for
        // wake-up races at the start).
        assert!(done.iter().all(|d| *d >= 5), "too few requests: {done:?}");
        for conn in 0..step.connections {
            let share: Vec<u32> = done
                .iter()
                .skip(conn)
                .step_by(step.connections)
                .copied()
                .collect();
            let (least, most) = (share.iter().min().unwrap(), share.iter().max().unwrap());
            assert!(most - least <= 2, "connection {conn} unfair: {share:?}");
        }
    }

    #[test]
    fn replies_are_checked() {
        assert_eq!(check(false, StatusCode::OK, b"true\n", b"vv"), Outcome::Ok);
        assert_eq!(
            check(false, StatusCode::OK, b"false", b"vv"),
            Outcome::Named("write-refused")
        );
        assert_eq!(check(true, StatusCode::OK, b"vv", b"vv"), Outcome::Ok);
        assert_eq!(
            check(true, StatusCode::OK, b"v", b"vv"),
            Outcome::WrongValue
        );
        assert_eq!(
            check(true, StatusCode::NOT_FOUND, b"", b"vv").name(),
            "HTTP-404"
        );
    }
}
