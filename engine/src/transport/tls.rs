//! TLS around a connection's TCP stream, for the transports that dial their
//! own sockets (gRPC, HTTP/1.1). The configuration comes with the endpoint
//! (plan::Tls); the transport names the one protocol it speaks on the
//! connection (ALPN), which a server may require: gRPC servers refuse a TLS
//! connection that did not agree on h2.

use std::io;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::plan::Tls;

/// ALPN's name for HTTP/2 (gRPC).
pub const H2: &[u8] = b"h2";
/// ALPN's name for HTTP/1.1.
pub const HTTP1: &[u8] = b"http/1.1";

/// The TLS handshake on `tcp` as `tls` says, offering `alpn`. A server whose
/// certificate does not check out fails it with rustls' reason (as an
/// io::Error of kind InvalidData: "invalid peer certificate: UnknownIssuer").
pub async fn handshake(tls: &Tls, tcp: TcpStream, alpn: &[u8]) -> io::Result<TlsStream<TcpStream>> {
    TlsConnector::from(tls.config().clone())
        .with_alpn(vec![alpn.to_vec()])
        .connect(tls.server_name().clone(), tcp)
        .await
}

/// The handshake alone, offering no ALPN: the reason a client that dials
/// its own TLS (ZooKeeper's crate) could not connect, which that client
/// reports only as "no available hosts". Under TLS 1.3 a server judges our
/// certificate after the handshake and answers with an alert, so the check
/// listens for `settle` before it calls the connection accepted (Ok).
pub async fn check(tls: &Tls, host: &str, port: u16, settle: Duration) -> io::Result<()> {
    let tcp = TcpStream::connect((host, port)).await?;
    let mut stream = TlsConnector::from(tls.config().clone())
        .connect(tls.server_name().clone(), tcp)
        .await?;
    match tokio::time::timeout(settle, stream.read(&mut [0u8; 1])).await {
        Err(_) => Ok(()), // silent: it waits for our first request
        Ok(Err(e)) => Err(e),
        Ok(Ok(_)) => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "the server closed the connection after the handshake",
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;

    use super::check;
    use crate::plan::pki::{Pki, endpoint};

    /// A TLS server on loopback that, once a handshake succeeds, holds the
    /// connection silently (as ZooKeeper waits for a session request).
    async fn silent_server(config: Arc<rustls::ServerConfig>) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(stream) = acceptor.accept(tcp).await {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        drop(stream);
                    }
                });
            }
        });
        address
    }

    /// The check passes a server that trusts us and we trust, and names
    /// the reason otherwise: its certificate from another CA, or ours
    /// missing where it requires one (an alert after the TLS 1.3 handshake).
    #[tokio::test]
    async fn check_says_why_a_handshake_fails() {
        let pki = Pki::new();
        let address = silent_server(pki.server(b"zk", true)).await;
        let outcome = |tls| async move {
            let endpoint = endpoint(address, tls);
            let tls = endpoint.tls.unwrap();
            // 200 ms: loopback's alert arrives within microseconds
            check(
                &tls,
                "127.0.0.1",
                address.port(),
                Duration::from_millis(200),
            )
            .await
        };
        assert!(outcome(pki.plan(&pki.ca, true)).await.is_ok());
        let error = outcome(pki.plan(&pki.other_ca, true)).await.unwrap_err();
        assert!(error.to_string().contains("UnknownIssuer"), "{error}");
        let error = outcome(pki.plan(&pki.ca, false)).await.unwrap_err();
        assert!(error.to_string().contains("alert"), "{error}");
    }
}
