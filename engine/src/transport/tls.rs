//! TLS around a connection's TCP stream, for the transports that dial their
//! own sockets (gRPC, HTTP/1.1). The configuration comes with the endpoint
//! (plan::Tls); the transport names the one protocol it speaks on the
//! connection (ALPN), which a server may require: gRPC servers refuse a TLS
//! connection that did not agree on h2.

use std::io;

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
