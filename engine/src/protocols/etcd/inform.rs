//! An informer's watch on etcd, as kube-apiserver's watch cache and
//! client-go's reflector make it: a Watch on the objects' prefix from one
//! revision past a list's, with progress notifications asked for, its
//! events (values too: a write's stamp is read from them) handed on as
//! they come. Field numbers from etcd's rpc.proto and kv.proto.

use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use tokio::sync::{Notify, mpsc};

use super::kube::Header;
use super::{Etcd, ProgressRequest, WATCH, WatchCreateRequest, WatchRequest, failure_outcome};
use crate::outcome::Outcome;
use crate::protocols::{News, ObjectEvent};
use crate::transport::grpc::frame;

/// A WatchResponse as an informer reads it: unlike the watch workload's
/// (`WatchResponse`, which skips them), its events keep their type and value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InformReply {
    #[prost(message, optional, tag = "1")]
    pub header: Option<Header>,
    #[prost(bool, tag = "3")]
    pub created: bool,
    #[prost(bool, tag = "4")]
    pub canceled: bool,
    #[prost(int64, tag = "5")]
    pub compact_revision: i64,
    #[prost(string, tag = "6")]
    pub cancel_reason: String,
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<InformEvent>,
}

/// Event.type: PUT 0, DELETE 1.
const DELETE: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct InformEvent {
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(message, optional, tag = "2")]
    pub kv: Option<InformKv>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InformKv {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(bytes = "bytes", tag = "5")]
    pub value: Bytes,
}

/// What one reply says, if anything: events, progress, or the watch's end
/// by compaction (Err: etcd cancelled it for another reason).
fn news(reply: InformReply) -> Result<Option<News>, Outcome> {
    if reply.canceled {
        if reply.compact_revision > 0 {
            return Ok(Some(News::Compacted(reply.compact_revision)));
        }
        return Err(Outcome::Named("watch-cancelled"));
    }
    if reply.compact_revision > 0 {
        return Ok(Some(News::Compacted(reply.compact_revision)));
    }
    if reply.created {
        return Ok(None);
    }
    if reply.events.is_empty() {
        let revision = reply.header.map_or(0, |h| h.revision);
        return Ok(Some(News::Progress(revision)));
    }
    let events = reply
        .events
        .into_iter()
        .filter_map(|event| {
            let kv = event.kv?;
            Some(ObjectEvent {
                key: kv.key,
                revision: kv.mod_revision,
                deleted: event.r#type == DELETE,
                value: kv.value,
            })
        })
        .collect();
    Ok(Some(News::Events(events)))
}

impl Etcd {
    pub(super) async fn inform_on(
        &self,
        conn: usize,
        (key, range_end): (Bytes, Bytes),
        revision: i64,
        sink: mpsc::Sender<News>,
        progress: Arc<Notify>,
    ) -> Result<(), Outcome> {
        let target = &self.targets[conn];
        let create = frame(&WatchRequest {
            create_request: Some(WatchCreateRequest {
                key,
                range_end,
                start_revision: revision,
                progress_notify: true,
            }),
            progress_request: None,
        });
        let uri = target.conn.uri(WATCH);
        let mut stream = target
            .conn
            .stream(&uri, create)
            .await
            .map_err(|failure| failure_outcome(&failure))?;
        let ask = frame(&WatchRequest {
            create_request: None,
            progress_request: Some(ProgressRequest {}),
        });
        loop {
            tokio::select! {
                () = progress.notified() => {
                    stream.send(ask.clone()).map_err(|f| failure_outcome(&f))?;
                }
                () = sink.closed() => {
                    stream.cancel();
                    return Ok(());
                }
                next = stream.next() => {
                    let Some(message) = next.map_err(|f| failure_outcome(&f))? else {
                        return Ok(()); // the stream ended: the informer resumes
                    };
                    let reply = InformReply::decode(message)
                        .map_err(|_| Outcome::Named("malformed"))?;
                    let Some(said) = news(reply)? else { continue };
                    let over = matches!(said, News::Compacted(_));
                    if sink.send(said).await.is_err() || over {
                        stream.cancel();
                        return Ok(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(events: Vec<InformEvent>) -> InformReply {
        InformReply {
            header: Some(Header { revision: 42 }),
            events,
            ..InformReply::default()
        }
    }

    #[test]
    fn replies_become_events_progress_or_the_end() {
        let kv = |key: &'static [u8], revision| InformKv {
            key: Bytes::from_static(key),
            mod_revision: revision,
            value: Bytes::from_static(b"v"),
        };
        let events = vec![
            InformEvent {
                r#type: 0,
                kv: Some(kv(b"/a", 7)),
            },
            InformEvent {
                r#type: DELETE,
                kv: Some(kv(b"/b", 8)),
            },
        ];
        let Ok(Some(News::Events(got))) = news(reply(events)) else {
            panic!("events expected");
        };
        assert_eq!(
            got.iter()
                .map(|e| (e.revision, e.deleted))
                .collect::<Vec<_>>(),
            vec![(7, false), (8, true)]
        );
        assert_eq!(news(reply(vec![])), Ok(Some(News::Progress(42))));
        let created = InformReply {
            created: true,
            ..reply(vec![])
        };
        assert_eq!(news(created), Ok(None));
        let compacted = InformReply {
            canceled: true,
            compact_revision: 30,
            ..reply(vec![])
        };
        assert_eq!(news(compacted), Ok(Some(News::Compacted(30))));
        let refused = InformReply {
            canceled: true,
            ..reply(vec![])
        };
        assert!(news(refused).is_err());
    }

    #[test]
    fn the_requests_carry_etcds_field_numbers() {
        let create = WatchRequest {
            create_request: Some(WatchCreateRequest {
                key: Bytes::from_static(b"/r/"),
                range_end: Bytes::from_static(b"/r0"),
                start_revision: 5,
                progress_notify: true,
            }),
            progress_request: None,
        };
        // field 1 (message): key 1, range_end 2, start_revision 3, progress_notify 4
        assert_eq!(
            create.encode_to_vec(),
            vec![
                10, 14, 10, 3, b'/', b'r', b'/', 18, 3, b'/', b'r', b'0', 24, 5, 32, 1
            ]
        );
        let ask = WatchRequest {
            create_request: None,
            progress_request: Some(ProgressRequest {}),
        };
        assert_eq!(ask.encode_to_vec(), vec![26, 0]); // field 3, empty
    }
}
