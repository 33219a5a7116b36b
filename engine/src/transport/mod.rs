//! Connections to the cluster, whatever the protocol on them: HTTP/2 for
//! gRPC (etcd) with its writes coalesced, HTTP/1.1 keep-alive (Consul), and
//! the failover both share (one return-home loop), each over TCP or TLS.

pub mod coalesce;
pub mod failover;
pub mod grpc;
pub mod http1;
pub mod tls;
