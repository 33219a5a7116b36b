//! A lock on etcd as its clients' Mutex makes one (client/v3/concurrency):
//! each locker holds a lease, kept alive every TTL/3, and a key of its own
//! under the lock's name, `<name><lease in hex>`, attached to that lease.
//! Keys are ordered by their create revision: the locker whose key was
//! created first holds the lock, and each other waits for the delete of the
//! key created just before its own (a Range sorted by create revision,
//! limited to revisions below its own), watched from the revision that
//! Range saw, so that only one waiter wakes at each release. The key's
//! create revision is the acquisition's fencing token. Releasing deletes
//! the key; a lease that expires deletes it too. Field numbers from etcd's
//! rpc.proto and kv.proto.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::inform::InformReply;
use super::kube::{Header, ObjectDelete, ObjectOp, ObjectRange, ObjectTxn, put_leased};
use super::{
    COMPARE_EQUAL, Compare, Etcd, WATCH, WatchCreateRequest, WatchRequest, failure_outcome,
};
use crate::outcome::Outcome;
use crate::protocols::Held;
use crate::transport::grpc::{Conn, frame};

const DELETE_RANGE: &str = "/etcdserverpb.KV/DeleteRange";
const LEASE_GRANT: &str = "/etcdserverpb.Lease/LeaseGrant";
const LEASE_REVOKE: &str = "/etcdserverpb.Lease/LeaseRevoke";
const LEASE_KEEP_ALIVE: &str = "/etcdserverpb.Lease/LeaseKeepAlive";
/// CompareTarget CREATE; SortOrder DESCEND; SortTarget CREATE.
const TARGET_CREATE: i32 = 1;
const DESCEND: i32 = 2;
const SORT_CREATE: i32 = 2;
/// Event.type DELETE.
const DELETE: i32 = 1;
/// How long a keep-alive stream that failed waits before it is made again.
const KEEP_ALIVE_RETRY: Duration = Duration::from_millis(200);

/// A Range as the recipe asks it: one key, or the key created last under
/// a prefix below a create revision.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LockRange {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub range_end: Bytes,
    #[prost(int64, tag = "3")]
    pub limit: i64,
    #[prost(int32, tag = "5")]
    pub sort_order: i32,
    #[prost(int32, tag = "6")]
    pub sort_target: i32,
    #[prost(int64, tag = "13")]
    pub max_create_revision: i64,
}

/// A KeyValue as the recipe reads it: its key and create revision.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LockKv {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LockRangeReply {
    #[prost(message, optional, tag = "1")]
    pub header: Option<Header>,
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<LockKv>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LockReplyOp {
    #[prost(message, optional, tag = "1")]
    pub response_range: Option<LockRangeReply>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LockTxnReply {
    #[prost(message, optional, tag = "1")]
    pub header: Option<Header>,
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
    #[prost(message, repeated, tag = "3")]
    pub responses: Vec<LockReplyOp>,
}

/// LeaseGrantRequest, LeaseRevokeRequest and LeaseKeepAliveRequest: a TTL
/// to grant (field 1), or the lease's ID (field 1).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseField {
    #[prost(int64, tag = "1")]
    pub value: i64,
}

/// LeaseGrantResponse and LeaseKeepAliveResponse: the lease's ID and TTL
/// (a keep-alive's TTL of 0 or less: the lease is gone).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseReply {
    #[prost(int64, tag = "2")]
    pub id: i64,
    #[prost(int64, tag = "3")]
    pub ttl: i64,
    #[prost(string, tag = "4")]
    pub error: String,
}

/// A locker's lease and the task keeping it alive.
pub struct LockSession {
    lease: i64,
    /// Set once a keep-alive found the lease gone.
    lost: Arc<AtomicBool>,
    stop: CancellationToken,
    keeping: JoinHandle<()>,
}

/// The end of the range of every key under `prefix`: its last byte raised.
fn prefix_end(prefix: &[u8]) -> Bytes {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Bytes::from(end);
        }
    }
    Bytes::from_static(b"\0") // every key
}

/// The locker's own key under lock `name`: the name, then its lease in hex.
fn own_key(name: &[u8], lease: i64) -> Bytes {
    let mut key = name.to_vec();
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    Bytes::from(key)
}

/// If the locker's key is not there (its create revision is 0), create it
/// on its lease; else read it. A compare's value of 0 is not encoded, so
/// the mod_revision compare's message serves for CREATE too.
fn create_txn(key: &Bytes, lease: i64) -> ObjectTxn {
    ObjectTxn {
        compare: vec![Compare {
            result: COMPARE_EQUAL,
            target: TARGET_CREATE,
            key: key.clone(),
            mod_revision: 0,
        }],
        success: vec![put_leased(key, Bytes::new(), lease)],
        failure: vec![ObjectOp {
            request_range: Some(ObjectRange {
                key: key.clone(),
                ..ObjectRange::default()
            }),
            ..ObjectOp::default()
        }],
    }
}

/// The key under `name` created last before `mine`.
fn predecessor(name: &[u8], mine: i64) -> LockRange {
    LockRange {
        key: Bytes::copy_from_slice(name),
        range_end: prefix_end(name),
        limit: 1,
        sort_order: DESCEND,
        sort_target: SORT_CREATE,
        max_create_revision: mine - 1,
    }
}

/// The locker's key's create revision from the create Txn's reply: the
/// reply's revision when it made the key, else the existing key's.
fn created_at(reply: &LockTxnReply) -> Option<i64> {
    if reply.succeeded {
        return reply.header.as_ref().map(|h| h.revision);
    }
    reply
        .responses
        .first()?
        .response_range
        .as_ref()?
        .kvs
        .first()
        .map(|kv| kv.create_revision)
}

impl Etcd {
    pub(super) async fn open_lock_session(
        &self,
        conn: usize,
        ttl_s: i64,
    ) -> Result<LockSession, Outcome> {
        let target = &self.targets[conn];
        let decode = |reply: &[u8]| {
            LeaseReply::decode(reply)
                .ok()
                .filter(|r| r.id != 0 && r.error.is_empty())
        };
        let granted = target
            .conn
            .unary(
                &target.conn.uri(LEASE_GRANT),
                frame(&LeaseField { value: ttl_s }),
                decode,
            )
            .await
            .map_err(|failure| failure_outcome(&failure))?;
        let lost = Arc::new(AtomicBool::new(false));
        let stop = CancellationToken::new();
        let keeping = tokio::spawn(keep_alive(
            target.conn.clone(),
            granted.id,
            granted.ttl,
            lost.clone(),
            stop.clone(),
        ));
        Ok(LockSession {
            lease: granted.id,
            lost,
            stop,
            keeping,
        })
    }

    /// Stops the keep-alives and leaves the lease to expire. The lease lives
    /// apart from any connection, so the connection (shared) stays.
    pub(super) async fn abandon_lock_session(session: LockSession) {
        session.stop.cancel();
        let _ = session.keeping.await;
    }

    pub(super) async fn close_lock_session(&self, conn: usize, session: LockSession) {
        session.stop.cancel();
        let _ = session.keeping.await;
        if session.lost.load(Ordering::Relaxed) {
            return;
        }
        let target = &self.targets[conn];
        let revoke = frame(&LeaseField {
            value: session.lease,
        });
        let _ = target
            .conn
            .unary(&target.conn.uri(LEASE_REVOKE), revoke, |_| Some(()))
            .await;
    }

    /// Acquires lock `name` (a prefix ending in "/") for `session`'s locker.
    pub(super) async fn acquire_lock(
        &self,
        conn: usize,
        session: &LockSession,
        name: &[u8],
    ) -> Result<Held, Outcome> {
        if session.lost.load(Ordering::Relaxed) {
            return Err(Outcome::Named("session-expired"));
        }
        let target = &self.targets[conn];
        let key = own_key(name, session.lease);
        let decode = |reply: &[u8]| {
            LockTxnReply::decode(reply)
                .ok()
                .and_then(|r| created_at(&r))
        };
        let mine = target
            .conn
            .unary(&target.txn, frame(&create_txn(&key, session.lease)), decode)
            .await
            .map_err(|failure| failure_outcome(&failure))?;
        let mut waited = false;
        loop {
            let decode = |reply: &[u8]| LockRangeReply::decode(reply).ok();
            let found = target
                .conn
                .unary(&target.range, frame(&predecessor(name, mine)), decode)
                .await
                .map_err(|failure| failure_outcome(&failure))?;
            let Some(before) = found.kvs.into_iter().next() else {
                break;
            };
            let at = found.header.map_or(0, |h| h.revision);
            self.wait_for_delete(conn, before.key, at).await?;
            waited = true;
        }
        // A lease that expired while its locker waited took the key along:
        // the lock is not held, whatever the predecessors did.
        if waited && !self.still_there(conn, &key).await? {
            return Err(Outcome::Named("session-expired"));
        }
        Ok(Held { key, token: mine })
    }

    pub(super) async fn release_lock(&self, conn: usize, held: &Held) -> Result<(), Outcome> {
        let target = &self.targets[conn];
        let delete = frame(&ObjectDelete {
            key: held.key.clone(),
        });
        target
            .conn
            .unary(&target.conn.uri(DELETE_RANGE), delete, |_| Some(()))
            .await
            .map_err(|failure| failure_outcome(&failure))
    }

    /// Deletes the locker's key under `name`, if it made one.
    pub(super) async fn withdraw_lock(&self, conn: usize, session: &LockSession, name: &[u8]) {
        let held = Held {
            key: own_key(name, session.lease),
            token: 0,
        };
        let _ = self.release_lock(conn, &held).await;
    }

    async fn still_there(&self, conn: usize, key: &Bytes) -> Result<bool, Outcome> {
        let target = &self.targets[conn];
        let range = frame(&LockRange {
            key: key.clone(),
            ..LockRange::default()
        });
        let decode = |reply: &[u8]| LockRangeReply::decode(reply).ok();
        let found = target
            .conn
            .unary(&target.range, range, decode)
            .await
            .map_err(|failure| failure_outcome(&failure))?;
        Ok(!found.kvs.is_empty())
    }

    /// Waits for `key`'s delete, watching it from `revision` on (a delete
    /// after the Range that found the key is not missed).
    async fn wait_for_delete(&self, conn: usize, key: Bytes, revision: i64) -> Result<(), Outcome> {
        let target = &self.targets[conn];
        let create = frame(&WatchRequest {
            create_request: Some(WatchCreateRequest {
                key,
                start_revision: revision,
                ..WatchCreateRequest::default()
            }),
            progress_request: None,
        });
        let mut stream = target
            .conn
            .stream(&target.conn.uri(WATCH), create)
            .await
            .map_err(|failure| failure_outcome(&failure))?;
        loop {
            let message = stream
                .next()
                .await
                .map_err(|failure| failure_outcome(&failure))?
                .ok_or(Outcome::Named("watch-ended"))?;
            let reply = InformReply::decode(message).map_err(|_| Outcome::Named("malformed"))?;
            if reply.canceled {
                return Err(Outcome::Named("watch-cancelled"));
            }
            if reply.events.iter().any(|e| e.r#type == DELETE) {
                stream.cancel();
                return Ok(());
            }
        }
    }
}

/// Keeps `lease` alive as etcd's client does: a keep-alive on a stream of
/// its own every third of the TTL, the stream made again when it fails.
/// A reply with no TTL left means the lease is gone: `lost` is set and the
/// keep-alives end.
async fn keep_alive(
    conn: Conn,
    lease: i64,
    ttl_s: i64,
    lost: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let every = Duration::from_secs_f64((ttl_s.max(1) as f64) / 3.0);
    let ask = frame(&LeaseField { value: lease });
    let uri = conn.uri(LEASE_KEEP_ALIVE);
    while !stop.is_cancelled() {
        let Ok(mut stream) = conn.stream(&uri, ask.clone()).await else {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(KEEP_ALIVE_RETRY) => continue,
            }
        };
        loop {
            tokio::select! {
                () = stop.cancelled() => {
                    stream.cancel();
                    return;
                }
                next = stream.next() => match next {
                    Ok(Some(message)) => {
                        if LeaseReply::decode(message).is_ok_and(|r| r.ttl <= 0) {
                            lost.store(true, Ordering::Relaxed);
                            stream.cancel();
                            return;
                        }
                    }
                    _ => break, // made again
                },
                () = tokio::time::sleep(every) => {
                    if stream.send(ask.clone()).is_err() {
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recipe_asks_with_etcds_field_numbers() {
        let range = predecessor(b"/l/", 10);
        // key 1, range_end 2, limit 3, sort_order 5, sort_target 6, max_create_revision 13
        assert_eq!(
            range.encode_to_vec(),
            vec![
                10, 3, b'/', b'l', b'/', 18, 3, b'/', b'l', b'0', 24, 1, 40, 2, 48, 2, 104, 9
            ]
        );
        let txn = create_txn(&Bytes::from_static(b"k"), 5);
        let compare = &txn.compare[0];
        // result 1 (EQUAL is 0, left out), target 2 = CREATE, key 3, the revision 0 left out
        assert_eq!(compare.encode_to_vec(), vec![16, 1, 26, 1, b'k']);
        assert_eq!(own_key(b"/l/", 255), Bytes::from_static(b"/l/ff"));
        assert_eq!(prefix_end(b"a\xff"), Bytes::from_static(b"b"));
    }

    #[test]
    fn the_create_revision_is_the_new_keys_or_the_old_ones() {
        let made = LockTxnReply {
            header: Some(Header { revision: 7 }),
            succeeded: true,
            responses: vec![],
        };
        assert_eq!(created_at(&made), Some(7));
        let found = LockTxnReply {
            header: Some(Header { revision: 9 }),
            succeeded: false,
            responses: vec![LockReplyOp {
                response_range: Some(LockRangeReply {
                    header: None,
                    kvs: vec![LockKv {
                        key: Bytes::from_static(b"k"),
                        create_revision: 4,
                    }],
                }),
            }],
        };
        assert_eq!(created_at(&found), Some(4));
    }
}
