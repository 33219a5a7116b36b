//! Informers, as client-go's reflector and kube-apiserver's watch cache run
//! them: each lists the objects (a page at a time, every page at the first
//! one's revision), then watches them from one past that revision, applying
//! every event to its own copy of the objects. A watch stream that ends is
//! resumed from one past the last revision seen; a watch whose start was
//! compacted away lists again (a relist). Each informer is on a connection
//! of its own.
//!
//! What is checked, as Kubernetes relies on it: no event arrives twice or
//! out of revision order, and at the end, once the informer has seen the
//! database's last revision (asked for by progress requests), its copy is
//! exactly a fresh list at that revision.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::driver::kubernetes::{Snapshot, list_all};
use crate::outcome::EngineError;
use crate::plan::{Plan, Step};
use crate::protocols::{News, ObjectEvent, Protocol};
use crate::workload::Workload;
use crate::workload::kubernetes::Objects;

/// How long an informer waits before listing or watching again after a failure.
const RETRY: Duration = Duration::from_millis(100);
/// How often a converging informer asks for progress.
const ASK_EVERY: Duration = Duration::from_millis(100);
/// The least time an informer's first list is given.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(60);
/// The problems kept per informer (the first ones; the rest are counted).
const MAX_PROBLEMS: usize = 20;

/// What one informer did and saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Informed {
    /// From its start to its first list's end (its cache synced).
    pub synced: Duration,
    /// Lists after the first: its watch was compacted away.
    pub relists: u64,
    /// Watches made again after a stream ended.
    pub resumes: u64,
    pub events: u64,
    /// For each put event whose value carried a stamp: from the write's
    /// send to the event's arrival, in microseconds.
    pub lags_us: Vec<u32>,
    /// It reached the database's last revision and its copy was compared.
    pub converged: bool,
    /// What was wrong (the first MAX_PROBLEMS), and how many in all.
    pub problems: Vec<String>,
    pub problem_count: u64,
}

impl Informed {
    fn problem(&mut self, said: impl FnOnce() -> String) {
        self.problem_count += 1;
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(said());
        }
    }
}

/// The run's informers: started before the measured load, finished after.
pub struct Informers<P: Protocol> {
    proto: Arc<P>,
    tasks: Vec<JoinHandle<Informed>>,
    target: watch::Sender<Option<Arc<Snapshot>>>,
    stop: CancellationToken,
}

impl<P: Protocol + 'static> Informers<P> {
    /// Starts the workload's informers (None without any) and returns once
    /// each has listed the objects and begun to watch them.
    pub async fn start(
        plan: &Plan,
        options: P::Options,
        workload: Arc<Workload>,
    ) -> Result<Option<Self>, EngineError> {
        let count = workload.objects().map_or(0, Objects::informers);
        if count == 0 {
            return Ok(None);
        }
        let own = Step {
            clients: count,
            connections: count,
            requests: 0,
            rate: 0.0,
        };
        let proto = Arc::new(P::open(plan, options, &own).await?);
        let (target, _) = watch::channel(None);
        let stop = CancellationToken::new();
        let mut synced = Vec::with_capacity(count);
        let tasks = (0..count)
            .map(|conn| {
                let (told, heard) = oneshot::channel();
                synced.push(heard);
                let informer = Informer {
                    proto: proto.clone(),
                    conn,
                    workload: workload.clone(),
                    target: target.subscribe(),
                    stop: stop.clone(),
                };
                tokio::spawn(informer.run(told))
            })
            .collect();
        let informers = Informers {
            proto,
            tasks,
            target,
            stop,
        };
        // A first list of many objects takes seconds; one that never ends
        // (the database unreachable) must not hold the run forever.
        let wait = plan.timeout.max(FIRST_LIST_WAIT);
        for (number, heard) in synced.into_iter().enumerate() {
            if !matches!(tokio::time::timeout(wait, heard).await, Ok(Ok(()))) {
                informers.stop.cancel();
                return Err(EngineError(format!(
                    "informer {number} did not list the objects within {} s",
                    wait.as_secs()
                )));
            }
        }
        Ok(Some(informers))
    }

    /// Has every informer catch up to the revision of `last` (the objects
    /// listed once more after the load; None: that list failed, and no
    /// informer can converge) and compare its copy, waiting `wait` at most;
    /// what each did.
    pub async fn finish(self, last: Option<Arc<Snapshot>>, wait: Duration) -> Vec<Informed> {
        if last.is_some() {
            let _ = self.target.send(last);
        }
        let stop = self.stop.clone();
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            stop.cancel();
        });
        let mut informed = Vec::with_capacity(self.tasks.len());
        for task in self.tasks {
            informed.push(task.await.unwrap_or_default());
        }
        stopper.abort();
        if let Some(proto) = Arc::into_inner(self.proto) {
            proto.close().await;
        }
        informed
    }
}

/// How a watch ended.
enum Ended {
    /// Its stream ended: watch again from one past the last revision seen.
    Resume,
    /// Its start was compacted away: list again.
    Relist,
    /// Stopped, or converged and compared.
    Done,
}

struct Informer<P: Protocol> {
    proto: Arc<P>,
    conn: usize,
    workload: Arc<Workload>,
    target: watch::Receiver<Option<Arc<Snapshot>>>,
    stop: CancellationToken,
}

/// An informer's copy of the objects, and the revision it has seen up to.
struct Cache {
    objects: HashMap<Bytes, i64>,
    seen: i64,
}

impl<P: Protocol + 'static> Informer<P> {
    async fn run(mut self, synced: oneshot::Sender<()>) -> Informed {
        let mut informed = Informed::default();
        let workload = self.workload.clone();
        let Some(objects) = workload.objects() else {
            return informed;
        };
        let started = Instant::now();
        let mut synced = Some(synced);
        loop {
            let Some(snapshot) = self.list(objects).await else {
                return informed;
            };
            let mut cache = Cache {
                objects: snapshot.objects,
                seen: snapshot.revision,
            };
            match synced.take() {
                Some(told) => {
                    informed.synced = started.elapsed();
                    let _ = told.send(());
                }
                None => informed.relists += 1,
            }
            loop {
                match self.watch(objects, &mut cache, &mut informed).await {
                    Ended::Resume => {
                        informed.resumes += 1;
                        if !self.pause().await {
                            return informed;
                        }
                    }
                    Ended::Relist => break,
                    Ended::Done => return informed,
                }
            }
        }
    }

    /// The objects, listed again after each failure until stopped.
    async fn list(&self, objects: &Objects) -> Option<Snapshot> {
        loop {
            if let Ok(snapshot) = list_all(&*self.proto, self.conn, objects).await {
                return Some(snapshot);
            }
            if !self.pause().await {
                return None;
            }
        }
    }

    /// Waits RETRY; false if stopped meanwhile.
    async fn pause(&self) -> bool {
        tokio::select! {
            () = self.stop.cancelled() => false,
            () = tokio::time::sleep(RETRY) => true,
        }
    }

    /// One watch from one past `cache.seen`, until it ends.
    async fn watch(
        &mut self,
        objects: &Objects,
        cache: &mut Cache,
        informed: &mut Informed,
    ) -> Ended {
        let (sink, mut news) = mpsc::channel(64);
        let progress = Arc::new(Notify::new());
        let (from, end) = objects.range();
        let watching = tokio::spawn({
            let (proto, conn, progress) = (self.proto.clone(), self.conn, progress.clone());
            let range = (Bytes::from(from), Bytes::from(end));
            let revision = cache.seen + 1;
            async move { proto.inform(conn, range, revision, sink, progress).await }
        });
        let mut asking = tokio::time::interval(ASK_EVERY);
        let ended = loop {
            let target = self.target.borrow().clone();
            if let Some(snapshot) = &target
                && cache.seen >= snapshot.revision
            {
                compare(cache, snapshot, informed);
                informed.converged = true;
                break Ended::Done;
            }
            tokio::select! {
                () = self.stop.cancelled() => break Ended::Done,
                said = news.recv() => match said {
                    Some(News::Events(events)) => apply(objects, cache, events, informed),
                    Some(News::Progress(revision)) => cache.seen = cache.seen.max(revision),
                    Some(News::Compacted(_)) => break Ended::Relist,
                    None => break Ended::Resume,
                },
                _ = asking.tick(), if target.is_some() => progress.notify_one(),
                _ = self.target.changed() => {}
            }
        };
        watching.abort();
        ended
    }
}

/// Each event into the cache, in order; one at or below the revision
/// already seen arrived twice or out of order.
fn apply(objects: &Objects, cache: &mut Cache, events: Vec<ObjectEvent>, informed: &mut Informed) {
    let now = objects.since_origin();
    for event in events {
        informed.events += 1;
        let had = cache.objects.get(&event.key).copied();
        if event.revision < cache.seen || had.is_some_and(|at| at >= event.revision) {
            informed.problem(|| {
                format!(
                    "{} at revision {} arrived after revision {} (it had {})",
                    String::from_utf8_lossy(&event.key),
                    event.revision,
                    cache.seen,
                    had.map_or_else(|| "no copy".into(), |at| format!("revision {at}")),
                )
            });
            continue;
        }
        cache.seen = event.revision;
        if event.deleted {
            cache.objects.remove(&event.key);
        } else {
            if let Some(sent) = objects.stamp_of(&event.value) {
                let us = now.saturating_sub(sent) / 1_000;
                informed.lags_us.push(u32::try_from(us).unwrap_or(u32::MAX));
            }
            cache.objects.insert(event.key, event.revision);
        }
    }
}

/// The informer's copy against the list at its end: every object there at
/// the same revision, and none it does not have.
fn compare(cache: &Cache, snapshot: &Snapshot, informed: &mut Informed) {
    let at = snapshot.revision;
    for (key, revision) in &snapshot.objects {
        let had = cache.objects.get(key);
        if had != Some(revision) {
            informed.problem(|| {
                let name = String::from_utf8_lossy(key);
                match had {
                    None => format!("{name} (revision {revision}) is missing; listed at {at}"),
                    Some(old) => format!("{name} is at revision {old}, listed at {at}: {revision}"),
                }
            });
        }
    }
    for (key, revision) in &cache.objects {
        if !snapshot.objects.contains_key(key) {
            informed.problem(|| {
                format!(
                    "{} (revision {revision}) is still there, gone from the list at {at}",
                    String::from_utf8_lossy(key)
                )
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::kubernetes::last_list;
    use crate::outcome::Outcome;
    use crate::protocols::Page;

    fn event(key: &'static str, revision: i64, deleted: bool) -> ObjectEvent {
        ObjectEvent {
            key: Bytes::from_static(key.as_bytes()),
            revision,
            deleted,
            value: Bytes::new(),
        }
    }

    fn cache(entries: &[(&'static str, i64)], seen: i64) -> Cache {
        Cache {
            objects: entries
                .iter()
                .map(|(k, r)| (Bytes::from_static(k.as_bytes()), *r))
                .collect(),
            seen,
        }
    }

    fn objects() -> Objects {
        Objects::new(&objects_plan(), 1).expect("a plan")
    }

    fn objects_plan() -> crate::plan::KubernetesPlan {
        crate::plan::KubernetesPlan {
            phase: crate::plan::KubernetesPhase::Run,
            prefix: "/registry/pods/".into(),
            count: 10,
            namespaces: 1,
            page_size: 500,
            first: 0,
            mix: ["get", "list", "create", "update", "delete", "event"]
                .iter()
                .map(|verb| {
                    (
                        (*verb).to_owned(),
                        if *verb == "update" { 1.0 } else { 0.0 },
                    )
                })
                .collect(),
            compaction: None,
            informers: 1,
            events: crate::plan::EventsPlan {
                prefix: "/registry/events/".into(),
                ttl_s: 3600,
                reuse: Duration::from_secs(60),
                max_per_lease: 1000,
            },
        }
    }

    #[test]
    fn events_apply_in_order_and_a_repeat_is_a_problem() {
        let mut c = cache(&[("a", 3)], 5);
        let mut informed = Informed::default();
        let o = objects();
        apply(
            &o,
            &mut c,
            vec![event("a", 6, false), event("b", 7, false)],
            &mut informed,
        );
        apply(&o, &mut c, vec![event("a", 8, true)], &mut informed);
        assert_eq!(c.seen, 8);
        assert_eq!(c.objects.len(), 1);
        assert_eq!(c.objects.get(&Bytes::from_static(b"b")), Some(&7));
        assert!(informed.problems.is_empty());
        // the same event again, and one older than what was seen
        apply(
            &o,
            &mut c,
            vec![event("b", 7, false), event("c", 4, false)],
            &mut informed,
        );
        assert_eq!(informed.problem_count, 2);
        assert!(informed.problems[0].starts_with("b at revision 7 arrived after revision 8"));
        assert_eq!(c.seen, 8);
        assert_eq!(informed.events, 5);
    }

    #[test]
    fn the_copy_must_be_the_list() {
        let snapshot = Snapshot {
            revision: 9,
            objects: cache(&[("a", 3), ("b", 7)], 0).objects,
        };
        let mut same = Informed::default();
        compare(&cache(&[("a", 3), ("b", 7)], 9), &snapshot, &mut same);
        assert_eq!(same.problem_count, 0);
        let mut differs = Informed::default();
        compare(&cache(&[("a", 2), ("c", 5)], 9), &snapshot, &mut differs);
        assert_eq!(differs.problem_count, 3);
        let said = differs.problems.join("; ");
        assert!(
            said.contains("a is at revision 2, listed at 9: 3"),
            "{said}"
        );
        assert!(
            said.contains("b (revision 7) is missing; listed at 9"),
            "{said}"
        );
        assert!(
            said.contains("c (revision 5) is still there, gone from the list at 9"),
            "{said}"
        );
    }

    /// A store of two objects whose first watch is compacted away at once:
    /// the informer must list again, then watch from the new list's
    /// revision, see one update, and converge on the end's list.
    struct Compacting {
        lists: std::sync::atomic::AtomicUsize,
        watches: std::sync::Mutex<Vec<i64>>,
    }

    /// The store: a at 3 and b at 4 until revision 10; a updated at 11.
    fn listed(first: bool) -> Page {
        let objects = if first {
            vec![(Bytes::from_static(b"/registry/pods/a"), 3)]
        } else {
            vec![(Bytes::from_static(b"/registry/pods/a"), 11)]
        };
        let mut objects = objects;
        objects.push((Bytes::from_static(b"/registry/pods/b"), 4));
        Page {
            revision: if first { 4 } else { 11 },
            objects,
            more: false,
            bytes: 0,
        }
    }

    impl Protocol for Compacting {
        const NAME: &'static str = "compacting";
        const OPTION_KEYS: &'static [&'static str] = &[];
        const AUTH_KEYS: &'static [&'static str] = &[];
        type Options = ();
        type Session = ();

        fn options(_: &crate::protocols::Given<'_>) -> Result<(), crate::plan::PlanError> {
            Ok(())
        }

        async fn open(_: &Plan, (): (), _: &Step) -> Result<Self, EngineError> {
            Ok(Compacting {
                lists: std::sync::atomic::AtomicUsize::new(0),
                watches: std::sync::Mutex::new(Vec::new()),
            })
        }

        async fn request(
            &self,
            _: usize,
            _: &crate::protocols::Request<'_>,
            _: &mut Instant,
        ) -> Outcome {
            Outcome::Ok
        }

        async fn close(self) {}

        async fn list_page(
            &self,
            _: usize,
            _: &[u8],
            _: &[u8],
            _: u64,
            _: i64,
        ) -> Result<Page, Outcome> {
            let n = self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // the informer's two lists see the store before the update; the
            // end's list (the third) after it
            Ok(listed(n < 2))
        }

        async fn inform(
            &self,
            _: usize,
            _: (Bytes, Bytes),
            revision: i64,
            news: mpsc::Sender<News>,
            progress: Arc<Notify>,
        ) -> Result<(), Outcome> {
            let first = {
                let mut watches = self.watches.lock().unwrap();
                watches.push(revision);
                watches.len() == 1
            };
            if first {
                let _ = news.send(News::Compacted(8)).await;
                return Ok(());
            }
            let update = ObjectEvent {
                value: Bytes::new(),
                ..event("/registry/pods/a", 11, false)
            };
            let _ = news.send(News::Events(vec![update])).await;
            loop {
                progress.notified().await;
                if news.send(News::Progress(11)).await.is_err() {
                    return Ok(());
                }
            }
        }
    }

    #[test]
    fn a_watch_compacted_away_lists_again_and_converges() {
        let mut plan = crate::plan::tests::good_plan();
        plan.kubernetes = Some(objects_plan());
        let workload = Arc::new(Workload::new(&plan).expect("a workload"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let informed = runtime.block_on(async {
            let informers = Informers::<Compacting>::start(&plan, (), workload.clone())
                .await
                .expect("started")
                .expect("one informer");
            let watches = informers.proto.watches.lock().unwrap().clone();
            assert_eq!(watches.first(), Some(&5)); // one past the first list's 4
            let objects = workload.objects().expect("objects");
            let wait = Duration::from_secs(10);
            let last = last_list(&*informers.proto, objects, wait).await;
            informers.finish(last.map(Arc::new), wait).await
        });
        let [one] = informed.as_slice() else {
            panic!("one informer: {informed:?}");
        };
        assert_eq!((one.relists, one.events, one.resumes), (1, 1, 0));
        assert!(one.converged && one.problems.is_empty(), "{one:?}");
    }

    #[test]
    fn a_stamp_is_read_back_and_a_late_one_is_lag() {
        let o = objects();
        let stamped = o.stamped(Bytes::from(vec![0u8; 64]));
        let sent = o.stamp_of(&stamped).expect("a stamp");
        assert!(sent <= o.since_origin());
        // a value too short, or one stamped in the future, carries none
        assert_eq!(o.stamp_of(b"short"), None);
        assert_eq!(o.stamp_of(&u64::MAX.to_le_bytes()), None);
        let mut c = cache(&[], 0);
        let mut informed = Informed::default();
        let put = ObjectEvent {
            value: stamped,
            ..event("a", 1, false)
        };
        apply(&o, &mut c, vec![put], &mut informed);
        assert_eq!(informed.lags_us.len(), 1);
    }
}
