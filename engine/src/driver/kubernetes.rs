//! Kubernetes' traffic sent through a protocol: each verb as kube-apiserver
//! sends it to etcd (its `storage/etcd3`), the table of objects told what
//! every reply showed. An update or delete whose compare fails is sent again
//! with the object's mod_revision from the failure's read, as the
//! apiserver's GuaranteedUpdate and its conditional delete do; the request
//! is timed from its first send to its last reply. A write whose object
//! another client deleted first ends `conflict` (the apiserver's NotFound):
//! the database doing its job, not an error.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::outcome::{EngineError, Outcome};
use crate::protocols::{News, Page, Protocol, Seen, Written};
use crate::workload::Workload;
use crate::workload::kubernetes::{Compacted, Objects, Task, Verb, lease_ttl_s};

/// etcd's outcome for a read at a revision compacted away.
pub(crate) const COMPACTED: &str = "OUT_OF_RANGE";

/// Sends `task` over connection `conn`.
pub async fn perform<P: Protocol>(
    proto: &P,
    conn: usize,
    objects: &Objects,
    task: &Task,
    value: Bytes,
    key: &mut Vec<u8>,
) -> Outcome {
    if task.verb == Verb::List {
        return match list(proto, conn, objects, task, true).await {
            Ok(()) => Outcome::Ok,
            Err(outcome) => outcome,
        };
    }
    if task.verb == Verb::Event {
        objects.event_key_into(task.object, key);
        return event(proto, conn, objects, value, key)
            .await
            .unwrap_or_else(|outcome| outcome);
    }
    objects.key_into(task.object, key);
    let result = match task.verb {
        Verb::Get => proto.get_object(conn, key).await.map(|seen| {
            objects.saw(task, seen.revision, seen.object);
            Outcome::Ok
        }),
        Verb::Create => create(proto, conn, objects, task, value, key).await,
        _ => until_written(proto, conn, objects, task, value, key).await,
    };
    result.unwrap_or_else(|outcome| outcome)
}

async fn create<P: Protocol>(
    proto: &P,
    conn: usize,
    objects: &Objects,
    task: &Task,
    value: Bytes,
    key: &[u8],
) -> Result<Outcome, Outcome> {
    match proto
        .create_object(conn, key, objects.stamped(value), 0)
        .await?
    {
        Written::Done(revision) => {
            objects.saw(task, revision, Some(revision));
            Ok(Outcome::Ok)
        }
        // A name no create used before: someone else made it.
        Written::Changed(seen) => {
            objects.saw(task, seen.revision, seen.object);
            Ok(Outcome::Named("already-exists"))
        }
    }
}

/// An event's create, with the lease the apiserver's lease manager would
/// attach: the current one while it is young and not full, else a new one,
/// granted while the book is held (as the apiserver holds its lock), so
/// that concurrent creates share it. A failed grant is the request's outcome.
async fn event<P: Protocol>(
    proto: &P,
    conn: usize,
    objects: &Objects,
    value: Bytes,
    key: &[u8],
) -> Result<Outcome, Outcome> {
    let lease = {
        let mut book = objects.leases.lock().await;
        match book.take(Instant::now(), objects.events()) {
            Some(lease) => lease,
            None => {
                let lease = proto
                    .grant_lease(conn, lease_ttl_s(objects.events()))
                    .await?;
                objects.lease_granted();
                book.granted(lease, Instant::now());
                lease
            }
        }
    };
    match proto.create_object(conn, key, value, lease).await? {
        Written::Done(_) => Ok(Outcome::Ok),
        Written::Changed(_) => Ok(Outcome::Named("already-exists")),
    }
}

/// An update or delete, sent again after each failed compare with what the
/// failure read, until it is applied or the object is gone.
async fn until_written<P: Protocol>(
    proto: &P,
    conn: usize,
    objects: &Objects,
    task: &Task,
    value: Bytes,
    key: &[u8],
) -> Result<Outcome, Outcome> {
    let mut expected = task.expected;
    loop {
        let written = if task.verb == Verb::Delete {
            proto.delete_object(conn, key, expected).await?
        } else {
            // stamped as each attempt is sent: an informer's lag counts
            // from the write that took effect
            let stamped = objects.stamped(value.clone());
            proto.update_object(conn, key, stamped, expected).await?
        };
        match written {
            Written::Done(revision) => {
                let now = (task.verb != Verb::Delete).then_some(revision);
                objects.saw(task, revision, now);
                return Ok(Outcome::Ok);
            }
            Written::Changed(Seen { revision, object }) => {
                objects.conflict(task.verb);
                objects.saw(task, revision, object);
                let Some(current) = object else {
                    return Ok(Outcome::Conflict);
                };
                objects.retry(task.verb);
                expected = current;
            }
        }
    }
}

/// What a list in pages hands its reader.
pub(crate) enum Listed {
    /// A page, and the revision every page of the list is read at.
    Page(Page, i64),
    /// The list's revision was compacted away: it starts again, whole.
    Restarted,
}

/// Every page of the resource, each after the first at the first one's
/// revision (as client-go's pager continues a list), handed to `seen`. A
/// page read at a past revision carries the current one in its header: what
/// every page shows is as of the first's. When that revision is compacted
/// away before the last page (etcd: OUT_OF_RANGE), the list is made again
/// whole, in one Range at the latest revision, as client-go's pager falls
/// back to a full list when its continue token expired. The measured lists
/// and the informers' both list this way.
pub(crate) async fn pages<P: Protocol>(
    proto: &P,
    conn: usize,
    objects: &Objects,
    mut seen: impl FnMut(Listed),
) -> Result<(), Outcome> {
    let (mut from, end) = objects.range();
    let (mut at, mut limit) = (0, objects.page_size());
    loop {
        let got = match proto.list_page(conn, &from, &end, limit, at).await {
            Err(Outcome::Named(COMPACTED)) if at != 0 => {
                seen(Listed::Restarted);
                (from, at, limit) = (objects.range().0, 0, 0);
                continue;
            }
            got => got?,
        };
        if at == 0 {
            at = got.revision;
        }
        let next = got.objects.last().map(|(key, _)| key.clone());
        let more = got.more;
        seen(Listed::Page(got, at));
        match next {
            Some(last) if more => {
                from.clear();
                from.extend_from_slice(&last);
                from.push(0); // the key right after the last one
            }
            _ => return Ok(()),
        }
    }
}

/// The objects at one revision: each key's mod_revision.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub revision: i64,
    pub objects: HashMap<Bytes, i64>,
}

/// Every object from a list at the latest revision, as the measured lists
/// page it (made again whole if its revision is compacted away first).
pub(crate) async fn list_all<P: Protocol>(
    proto: &P,
    conn: usize,
    objects: &Objects,
) -> Result<Snapshot, Outcome> {
    let mut snapshot = Snapshot::default();
    pages(proto, conn, objects, |listed| match listed {
        Listed::Restarted => snapshot = Snapshot::default(),
        Listed::Page(page, at) => {
            snapshot.revision = at;
            snapshot.objects.extend(page.objects);
        }
    })
    .await?;
    Ok(snapshot)
}

/// How long the last list waits before it is asked again.
const LAST_LIST_RETRY: Duration = Duration::from_millis(100);

/// The objects once the load is over, listed on a connection of its own
/// and asked again for up to `wait` (a cluster may be electing a leader);
/// None when no list answered. The table is audited against it and the
/// informers converge on it.
pub async fn last_list<P: Protocol>(
    proto: &P,
    objects: &Objects,
    wait: Duration,
) -> Option<Snapshot> {
    let deadline = Instant::now() + wait;
    loop {
        if let Ok(snapshot) = list_all(proto, 0, objects).await {
            return Some(snapshot);
        }
        if Instant::now() + LAST_LIST_RETRY >= deadline {
            return None;
        }
        tokio::time::sleep(LAST_LIST_RETRY).await;
    }
}

/// A measured (or the first) list: every object it returns updates the
/// table; `counted`: its pages count in the run's list figures.
async fn list<P: Protocol>(
    proto: &P,
    conn: usize,
    objects: &Objects,
    task: &Task,
    counted: bool,
) -> Result<(), Outcome> {
    pages(proto, conn, objects, |listed| match listed {
        Listed::Restarted => objects.list_restarted(),
        Listed::Page(page, at) => {
            if counted {
                objects.page(page.objects.len(), page.bytes);
            }
            for (key, mod_revision) in &page.objects {
                objects.listed(task, key, at, *mod_revision);
            }
        }
    })
    .await
}

/// The table's first sight of the objects: one list before the measured
/// requests, unmeasured (the apiserver lists every resource as it starts).
pub async fn fill<P: Protocol>(proto: &P, objects: &Objects) -> Result<(), EngineError> {
    let task = objects.draw_list();
    list(proto, 0, objects, &task, false)
        .await
        .map_err(|outcome| {
            EngineError(format!(
                "the first list of the objects failed: {}",
                outcome.name()
            ))
        })
}

/// kube-apiserver's compactor, on a connection of its own: every
/// `interval`, it claims the compaction on the compact key's version and,
/// when it wins the claim, compacts to the revision its previous claim saw
/// (none the first time), so that one interval of history stays. A failed
/// step is tried again the next interval, as the apiserver does. Each
/// compaction is kept with its start and end: the protocol's compact
/// returns once the database has removed what it compacted away, so the
/// load's latency inside that span can be set against the rest.
pub async fn compactor<P: Protocol>(
    proto: P,
    workload: Arc<Workload>,
    interval: Duration,
    stop: CancellationToken,
) {
    let Some(objects) = workload.objects() else {
        return;
    };
    let (mut version, mut seen) = (0, 0);
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            () = tokio::time::sleep(interval) => {}
        }
        let Ok(claim) = proto.claim_compaction(0, version, seen).await else {
            continue;
        };
        let to = seen;
        (version, seen) = (claim.version, claim.revision);
        if claim.claimed && to > 0 {
            let started = Instant::now();
            if proto.compact(0, to).await.is_ok() {
                objects.compacted(Compacted {
                    started,
                    ended: Instant::now(),
                    revision: to,
                });
            }
        }
    }
    proto.close().await;
}

/// How long the expiry watcher waits before watching again after a failure.
const REWATCH: Duration = Duration::from_millis(100);

/// Counts the events that expire during the run, on a connection of its
/// own: the load never deletes an event, so every delete a watch of the
/// events' prefix delivers is an expiration (its lease's TTL ran out). A
/// stream that ends is watched again from one past the last revision seen.
pub async fn expirations<P: Protocol>(proto: P, workload: Arc<Workload>, stop: CancellationToken) {
    let Some(objects) = workload.objects() else {
        return;
    };
    let (from, end) = objects.events_range();
    let range = (Bytes::from(from), Bytes::from(end));
    let mut next = 0; // from now on
    while !stop.is_cancelled() {
        let (news, mut heard) = tokio::sync::mpsc::channel(64);
        let progress = Arc::new(tokio::sync::Notify::new());
        let watching = proto.inform(0, range.clone(), next, news, progress);
        tokio::pin!(watching);
        let mut finished = false;
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                _ = &mut watching, if !finished => finished = true,
                got = heard.recv() => match got {
                    Some(News::Events(events)) => {
                        let gone = events.iter().filter(|e| e.deleted).count() as u64;
                        if let Some(last) = events.last() {
                            next = last.revision + 1;
                        }
                        if gone > 0 {
                            objects.expired(gone, Instant::now());
                        }
                    }
                    // its start compacted away: watch from now on instead
                    Some(News::Compacted(_)) => next = 0,
                    Some(News::Progress(_)) => {}
                    None => break,
                },
            }
        }
        if !stop.is_cancelled() {
            tokio::time::sleep(REWATCH).await;
        }
    }
    proto.close().await;
}
