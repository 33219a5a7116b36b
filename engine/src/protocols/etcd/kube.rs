//! kube-apiserver's storage calls (its `storage/etcd3`), as the Kubernetes
//! traffic sends them: a linearizable get, creates, updates and deletes as
//! Txns compared on the object's mod_revision (a failed compare reads the
//! object instead, so the reply says what it is now), and a list's pages
//! (a Range with a limit, every page after the first at the first one's
//! revision). Replies are decoded with prost into the few fields read; an
//! object's value is skipped, not copied. Field numbers from etcd's rpc.proto.

use bytes::Bytes;
use prost::Message;

use super::{COMPARE_EQUAL, Compare, Etcd, TARGET_MOD, failure_outcome, well_formed};
use crate::outcome::Outcome;
use crate::protocols::{Claim, Page, Seen, Written};
use crate::transport::grpc::frame;

/// A Range as a get or a list's page asks it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectRange {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub range_end: Bytes,
    #[prost(int64, tag = "3")]
    pub limit: i64,
    #[prost(int64, tag = "4")]
    pub revision: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectDelete {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
}

/// A put, attached to a lease when `lease` is not 0.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectPut {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
    #[prost(int64, tag = "3")]
    pub lease: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantRequest {
    #[prost(int64, tag = "1")]
    pub ttl: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantReply {
    #[prost(int64, tag = "2")]
    pub id: i64,
    #[prost(string, tag = "4")]
    pub error: String,
}

const LEASE_GRANT: &str = "/etcdserverpb.Lease/LeaseGrant";

#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectOp {
    #[prost(message, optional, tag = "1")]
    pub request_range: Option<ObjectRange>,
    #[prost(message, optional, tag = "2")]
    pub request_put: Option<ObjectPut>,
    #[prost(message, optional, tag = "3")]
    pub request_delete_range: Option<ObjectDelete>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectTxn {
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<ObjectOp>,
    #[prost(message, repeated, tag = "3")]
    pub failure: Vec<ObjectOp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Header {
    #[prost(int64, tag = "3")]
    pub revision: i64,
}

/// A KeyValue without its value (skipped by the decoder).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Listed {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(int64, tag = "4")]
    pub version: i64,
}

/// A compare on a key's version (CompareTarget VERSION is 0).
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionCompare {
    #[prost(int32, tag = "1")]
    pub result: i32,
    #[prost(int32, tag = "2")]
    pub target: i32,
    #[prost(bytes = "bytes", tag = "3")]
    pub key: Bytes,
    #[prost(int64, tag = "4")]
    pub version: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ClaimTxn {
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<VersionCompare>,
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<ObjectOp>,
    #[prost(message, repeated, tag = "3")]
    pub failure: Vec<ObjectOp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CompactionRequest {
    #[prost(int64, tag = "1")]
    pub revision: i64,
    #[prost(bool, tag = "2")]
    pub physical: bool,
}

/// The key kube-apiserver's compactors claim each compaction on.
pub const COMPACT_KEY: &[u8] = b"compact_rev_key";
const TARGET_VERSION: i32 = 0;
const COMPACT: &str = "/etcdserverpb.KV/Compact";

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeReply {
    #[prost(message, optional, tag = "1")]
    pub header: Option<Header>,
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<Listed>,
    #[prost(bool, tag = "3")]
    pub more: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ReplyOp {
    #[prost(message, optional, tag = "1")]
    pub response_range: Option<RangeReply>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnReply {
    #[prost(message, optional, tag = "1")]
    pub header: Option<Header>,
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
    #[prost(message, repeated, tag = "3")]
    pub responses: Vec<ReplyOp>,
}

fn revision(header: Option<&Header>) -> i64 {
    header.map_or(0, |h| h.revision)
}

/// What a Range of one key says of it.
fn seen(reply: &RangeReply) -> Seen {
    Seen {
        revision: revision(reply.header.as_ref()),
        object: reply.kvs.first().map(|kv| kv.mod_revision),
    }
}

/// A Txn's outcome: applied at the header's revision, or the object as the
/// failure branch's Range found it.
fn written(reply: &TxnReply) -> Written {
    let at = revision(reply.header.as_ref());
    if reply.succeeded {
        return Written::Done(at);
    }
    let object = read_back(reply).map(|kv| kv.mod_revision);
    Written::Changed(Seen {
        revision: at,
        object,
    })
}

/// The key a failed compare's read found (None: it is not there).
fn read_back(reply: &TxnReply) -> Option<&Listed> {
    reply
        .responses
        .first()
        .and_then(|op| op.response_range.as_ref())
        .and_then(|range| range.kvs.first())
}

fn get(key: Bytes) -> ObjectOp {
    ObjectOp {
        request_range: Some(ObjectRange {
            key,
            ..ObjectRange::default()
        }),
        ..ObjectOp::default()
    }
}

/// `then` if `key`'s mod_revision is `expected` (0: the key is not there),
/// else a read of it.
pub fn conditional(key: &[u8], expected: i64, then: ObjectOp) -> ObjectTxn {
    let key = Bytes::copy_from_slice(key);
    ObjectTxn {
        compare: vec![Compare {
            result: COMPARE_EQUAL,
            target: TARGET_MOD,
            key: key.clone(),
            mod_revision: expected,
        }],
        success: vec![then],
        failure: vec![get(key)],
    }
}

pub fn put(key: &[u8], value: Bytes) -> ObjectOp {
    put_leased(key, value, 0)
}

pub fn put_leased(key: &[u8], value: Bytes, lease: i64) -> ObjectOp {
    ObjectOp {
        request_put: Some(ObjectPut {
            key: Bytes::copy_from_slice(key),
            value,
            lease,
        }),
        ..ObjectOp::default()
    }
}

pub fn delete(key: &[u8]) -> ObjectOp {
    ObjectOp {
        request_delete_range: Some(ObjectDelete {
            key: Bytes::copy_from_slice(key),
        }),
        ..ObjectOp::default()
    }
}

impl Etcd {
    pub(super) async fn get_one(&self, conn: usize, key: &[u8]) -> Result<Seen, Outcome> {
        let target = &self.targets[conn];
        let range = frame(&ObjectRange {
            key: Bytes::copy_from_slice(key),
            ..ObjectRange::default()
        });
        let decode = |reply: &[u8]| RangeReply::decode(reply).ok().map(|r| seen(&r));
        target
            .conn
            .unary(&target.range, range, decode)
            .await
            .map_err(|failure| failure_outcome(&failure))
    }

    pub(super) async fn txn(&self, conn: usize, txn: ObjectTxn) -> Result<Written, Outcome> {
        let target = &self.targets[conn];
        let decode = |reply: &[u8]| TxnReply::decode(reply).ok().map(|r| written(&r));
        target
            .conn
            .unary(&target.txn, frame(&txn), decode)
            .await
            .map_err(|failure| failure_outcome(&failure))
    }

    pub(super) async fn page(
        &self,
        conn: usize,
        from: &[u8],
        end: &[u8],
        limit: u64,
        revision: i64,
    ) -> Result<Page, Outcome> {
        let target = &self.targets[conn];
        let range = frame(&ObjectRange {
            key: Bytes::copy_from_slice(from),
            range_end: Bytes::copy_from_slice(end),
            limit: i64::try_from(limit).unwrap_or(i64::MAX),
            revision,
        });
        let decode = |reply: &[u8]| {
            RangeReply::decode(reply).ok().map(|r| Page {
                revision: self::revision(r.header.as_ref()),
                objects: r
                    .kvs
                    .into_iter()
                    .map(|kv| (kv.key, kv.mod_revision))
                    .collect(),
                more: r.more,
                bytes: reply.len(),
            })
        };
        target
            .conn
            .unary(&target.range, range, decode)
            .await
            .map_err(|failure| failure_outcome(&failure))
    }
}

/// The claim's outcome: claimed (the version went up by one), or the
/// version another compactor left.
fn claimed(reply: &TxnReply, version: i64) -> Claim {
    let revision = revision(reply.header.as_ref());
    if reply.succeeded {
        return Claim {
            claimed: true,
            version: version + 1,
            revision,
        };
    }
    let now = read_back(reply).map_or(0, |kv| kv.version);
    Claim {
        claimed: false,
        version: now,
        revision,
    }
}

impl Etcd {
    pub(super) async fn claim(
        &self,
        conn: usize,
        version: i64,
        revision: i64,
    ) -> Result<Claim, Outcome> {
        let target = &self.targets[conn];
        let key = Bytes::from_static(COMPACT_KEY);
        let txn = ClaimTxn {
            compare: vec![VersionCompare {
                result: COMPARE_EQUAL,
                target: TARGET_VERSION,
                key: key.clone(),
                version,
            }],
            success: vec![put(COMPACT_KEY, Bytes::from(revision.to_string()))],
            failure: vec![get(key)],
        };
        let decode = |reply: &[u8]| TxnReply::decode(reply).ok().map(|r| claimed(&r, version));
        target
            .conn
            .unary(&target.txn, frame(&txn), decode)
            .await
            .map_err(|failure| failure_outcome(&failure))
    }

    /// Grants a lease of `ttl_s` seconds (etcd may raise a TTL below its
    /// minimum); its id. A reply with an error and no id is refused.
    pub(super) async fn grant(&self, conn: usize, ttl_s: i64) -> Result<i64, Outcome> {
        let target = &self.targets[conn];
        let request = frame(&LeaseGrantRequest { ttl: ttl_s });
        let decode = |reply: &[u8]| {
            LeaseGrantReply::decode(reply)
                .ok()
                .filter(|r| r.id != 0 && r.error.is_empty())
                .map(|r| r.id)
        };
        target
            .conn
            .unary(&target.conn.uri(LEASE_GRANT), request, decode)
            .await
            .map_err(|failure| failure_outcome(&failure))
    }

    /// Compacts to `revision`, replying once the backend has removed the
    /// old revisions (`physical`). kube-apiserver asks without it and does
    /// not wait; the wait changes nothing for the load (the compaction runs
    /// the same and nothing else waits on this connection), but makes the
    /// reply mark the compaction's end. It costs one backend commit more per
    /// compaction (etcd commits after a physical one).
    pub(super) async fn compact_to(&self, conn: usize, revision: i64) -> Result<(), Outcome> {
        let target = &self.targets[conn];
        let request = frame(&CompactionRequest {
            revision,
            physical: true,
        });
        let decodes = |reply: &[u8]| well_formed(reply).then_some(());
        target
            .conn
            .unary(&target.conn.uri(COMPACT), request, decodes)
            .await
            .map_err(|failure| failure_outcome(&failure))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conditional_write_uses_etcds_field_numbers() {
        let txn = conditional(b"/registry/pods/a", 7, delete(b"/registry/pods/a"));
        let bytes = txn.encode_to_vec();
        // compare(1){target MOD(2:2), key(3), mod_revision(6): 7}
        assert!(bytes.starts_with(b"\x0a\x16\x10\x02\x1a\x10/registry/pods/a\x30\x07"));
        // success(2){request_delete_range(3){key}}, failure(3){request_range(1){key}}
        assert!(bytes.windows(4).any(|w| w == b"\x12\x14\x1a\x12"));
        assert!(bytes.windows(4).any(|w| w == b"\x1a\x14\x0a\x12"));
    }

    #[test]
    fn replies_say_what_was_done_or_what_is_there() {
        let kv = |key: &[u8], rev| Listed {
            key: Bytes::copy_from_slice(key),
            mod_revision: rev,
            version: 1,
        };
        let header = Some(Header { revision: 40 });
        let done = TxnReply {
            header: header.clone(),
            succeeded: true,
            responses: vec![],
        };
        assert_eq!(written(&done), Written::Done(40));
        let changed = TxnReply {
            header: header.clone(),
            succeeded: false,
            responses: vec![ReplyOp {
                response_range: Some(RangeReply {
                    header: header.clone(),
                    kvs: vec![kv(b"k", 33)],
                    more: false,
                }),
            }],
        };
        let seen_now = Seen {
            revision: 40,
            object: Some(33),
        };
        assert_eq!(written(&changed), Written::Changed(seen_now));
        let gone = TxnReply {
            responses: vec![ReplyOp {
                response_range: Some(RangeReply::default()),
            }],
            ..changed
        };
        assert_eq!(
            written(&gone),
            Written::Changed(Seen {
                revision: 40,
                object: None
            })
        );
    }
}
