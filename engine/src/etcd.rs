//! etcd over gRPC: one tonic channel (its own HTTP/2 connection) per
//! connection, hand-written prost messages carrying only the fields used
//! (field numbers from dbtester/proto/etcd.proto; prost skips the rest).

use std::time::Instant;

use bytes::Bytes;
use futures_util::future::try_join_all;
use http::uri::PathAndQuery;
use tonic::client::Grpc;
use tonic::transport::{Channel, Endpoint as TonicEndpoint};
use tonic::{Code, Request, Status};
use tonic_prost::ProstCodec;

use crate::outcome::{EngineError, Outcome, chain};
use crate::plan::{Balancer, Consistency, Endpoint, Operation, Plan, Step};
use crate::protocol::{Protocol, endpoint_for, within};

const PUT: &str = "/etcdserverpb.KV/Put";
const RANGE: &str = "/etcdserverpb.KV/Range";
const STATUS: &str = "/etcdserverpb.Maintenance/Status";

#[derive(Clone, PartialEq, prost::Message)]
pub struct PutRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

/// Its header is not needed: a reply that decodes is a success.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PutResponse {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeRequest {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bool, tag = "7")]
    pub serializable: bool,
    #[prost(bool, tag = "9")]
    pub count_only: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeResponse {
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(bytes = "bytes", tag = "5")]
    pub value: Bytes,
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
}

pub struct Etcd {
    conns: Vec<Grpc<Channel>>,
    value: Bytes,
    read: bool,
    serializable: bool,
}

impl Protocol for Etcd {
    async fn open(plan: &Plan, step: &Step) -> Result<Self, EngineError> {
        let Plan {
            protocol: crate::plan::Protocol::Etcd { balancer },
            ..
        } = plan
        else {
            unreachable!("etcd opened for another protocol");
        };
        // A Channel queues calls in a buffer before its connection takes them;
        // leave room for every client so none waits there instead of on the server.
        let buffer = step.clients.max(1024);
        let leader = if *balancer == Balancer::Leader {
            Some(leader(plan).await?)
        } else {
            None
        };
        let conns = try_join_all((0..step.connections).map(|c| {
            let target = match (balancer, &leader) {
                (Balancer::Leader, Some(leader)) => leader,
                (Balancer::PickFirst, _) => &plan.endpoints[0],
                _ => endpoint_for(plan, c),
            };
            async move {
                let channel = connect(plan, target, buffer).await?;
                let grpc = Grpc::new(channel).max_decoding_message_size(usize::MAX);
                probe(plan, target, grpc.clone()).await?;
                Ok::<_, EngineError>(grpc)
            }
        }))
        .await?;
        Ok(Etcd {
            conns,
            value: Bytes::from(plan.value()),
            read: plan.operation == Operation::Read,
            serializable: plan.consistency == Consistency::Serializable,
        })
    }

    async fn request(&self, conn: usize, key: &[u8], _sent: &mut Instant) -> Outcome {
        // Clones share the channel (its connection); unary() needs its own handle.
        let mut grpc = self.conns[conn].clone();
        if grpc.ready().await.is_err() {
            // The channel cannot reach the member: gRPC's UNAVAILABLE.
            return Outcome::Named("UNAVAILABLE");
        }
        let key = Bytes::copy_from_slice(key);
        if self.read {
            let request = RangeRequest {
                key,
                serializable: self.serializable,
                count_only: false,
            };
            let path = PathAndQuery::from_static(RANGE);
            let codec = ProstCodec::<RangeRequest, RangeResponse>::default();
            match grpc.unary(Request::new(request), path, codec).await {
                Ok(reply) => match reply.get_ref().kvs.first() {
                    Some(kv) if kv.value == self.value => Outcome::Ok,
                    _ => Outcome::WrongValue,
                },
                Err(status) => status_outcome(&status),
            }
        } else {
            let request = PutRequest {
                key,
                value: self.value.clone(),
            };
            let path = PathAndQuery::from_static(PUT);
            let codec = ProstCodec::<PutRequest, PutResponse>::default();
            match grpc.unary(Request::new(request), path, codec).await {
                Ok(_) => Outcome::Ok,
                Err(status) => status_outcome(&status),
            }
        }
    }

    async fn close(self) {
        // Dropping the last handle to a channel closes its connection.
        drop(self.conns);
    }
}

async fn connect(plan: &Plan, target: &Endpoint, buffer: usize) -> Result<Channel, EngineError> {
    let what = || format!("cannot connect to etcd at {}", target.authority);
    let endpoint = TonicEndpoint::from_shared(format!("http://{}", target.authority))
        .map_err(|e| EngineError(format!("{}: {}", what(), chain(&e))))?
        .tcp_nodelay(true)
        .connect_timeout(plan.timeout)
        .buffer_size(buffer);
    within(plan.timeout, what, async {
        endpoint
            .connect()
            .await
            .map_err(|e| EngineError(format!("{}: {}", what(), chain(&e))))
    })
    .await
}

/// A TCP connection (even an HTTP/2 one) proves little: one harmless call
/// (counting keys under a prefix nothing uses; serializable, so it needs no
/// leader) shows an etcd answers on it before the step counts on it.
async fn probe(plan: &Plan, target: &Endpoint, mut grpc: Grpc<Channel>) -> Result<(), EngineError> {
    let what = || format!("etcd at {} did not answer a probe", target.authority);
    within(plan.timeout, what, async {
        grpc.ready()
            .await
            .map_err(|e| EngineError(format!("{}: {}", what(), chain(&e))))?;
        let request = RangeRequest {
            key: Bytes::from_static(b"\0dbtester-probe"),
            serializable: true,
            count_only: true,
        };
        let codec = ProstCodec::<RangeRequest, RangeResponse>::default();
        let path = PathAndQuery::from_static(RANGE);
        match grpc.unary(Request::new(request), path, codec).await {
            Ok(_) => Ok(()),
            // Any status the server itself sent (UNIMPLEMENTED from a stand-in
            // that serves only Put, an auth error) proves a gRPC server is there.
            Err(status) if std::error::Error::source(&status).is_none() => Ok(()),
            Err(status) => Err(EngineError(format!("{}: {}", what(), describe(&status)))),
        }
    })
    .await
}

/// A status for a message: its outcome name and what the server said.
fn describe(status: &Status) -> String {
    let name = status_outcome(status).name();
    match std::error::Error::source(status) {
        Some(cause) => format!("{name}: {}", chain(cause)),
        None if status.message().is_empty() => name.into_owned(),
        None => format!("{name}: {}", status.message()),
    }
}

/// The endpoint whose member is the leader: Maintenance.Status on each,
/// the one reporting itself (`leader == header.member_id`).
async fn leader(plan: &Plan) -> Result<Endpoint, EngineError> {
    let mut notes = Vec::new();
    for endpoint in &plan.endpoints {
        match status(plan, endpoint).await {
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

async fn status(plan: &Plan, endpoint: &Endpoint) -> Result<StatusResponse, EngineError> {
    let channel = connect(plan, endpoint, 16).await?;
    let mut grpc = Grpc::new(channel);
    let what = || format!("etcd at {}: Maintenance.Status", endpoint.authority);
    within(plan.timeout, what, async {
        grpc.ready()
            .await
            .map_err(|e| EngineError(format!("{}: {}", what(), chain(&e))))?;
        let codec = ProstCodec::<StatusRequest, StatusResponse>::default();
        let path = PathAndQuery::from_static(STATUS);
        match grpc
            .unary(Request::new(StatusRequest {}), path, codec)
            .await
        {
            Ok(reply) => Ok(reply.into_inner()),
            Err(status) => Err(EngineError(format!(
                "{}: {}",
                what(),
                status_outcome(&status).name()
            ))),
        }
    })
    .await
}

/// A status the server sent carries no source; one tonic made from a local
/// transport error does. gRPC calls a server it cannot reach UNAVAILABLE, and
/// so do etcd's own tools: the outcome is named the same way here.
fn status_outcome(status: &Status) -> Outcome {
    match std::error::Error::source(status) {
        Some(_) => Outcome::Named("UNAVAILABLE"),
        None => Outcome::Named(code_name(status.code())),
    }
}

/// gRPC's own names for its status codes.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

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
        // RangeResponse{header{member_id 9}, kvs[{key "k", value "v"}], count 1}:
        // unknown fields are skipped, kvs[0].value is read.
        let reply = b"\x0a\x02\x10\x09\x12\x06\x0a\x01k\x2a\x01v\x20\x01";
        let decoded = RangeResponse::decode(&reply[..]).unwrap();
        assert_eq!(decoded.kvs[0].value, Bytes::from_static(b"v"));
        let status = StatusResponse::decode(&b"\x0a\x02\x10\x07\x20\x07"[..]).unwrap();
        assert_eq!((status.header.unwrap().member_id, status.leader), (7, 7));
    }

    #[test]
    fn server_statuses_keep_grpc_names() {
        let status = Status::new(Code::ResourceExhausted, "quota");
        assert_eq!(status_outcome(&status).name(), "RESOURCE_EXHAUSTED");
        assert_eq!(code_name(Code::DeadlineExceeded), "DEADLINE_EXCEEDED");
        let local = Status::from_error(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        // A server the client cannot reach is UNAVAILABLE, as gRPC names it.
        assert_eq!(status_outcome(&local), Outcome::Named("UNAVAILABLE"));
    }
}
