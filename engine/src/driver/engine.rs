//! A load's lifecycle: its own OS thread running a tokio runtime, the
//! counters and stop signal Python reads and pulls, and the result handed
//! over once, when the thread is done.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::driver::check::Operation as CheckedOperation;
use crate::driver::pacing;
use crate::outcome::EngineError;
use crate::plan::Plan;
use crate::protocols::Protocol;
use crate::records::{Clock, Records};
use crate::workload::Workload;
use crate::workload::watch::Watched;

/// How long the runtime's remaining tasks get once the run is over.
const SHUTDOWN: Duration = Duration::from_millis(100);

/// Why a run ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum StopReason {
    Stopped = 1,
    MaxErrors = 2,
}

/// Shared by the runtime (writer) and Python (reader): lock-free.
#[derive(Debug)]
pub struct Control {
    done: AtomicU64,
    errors: AtomicU64,
    step: AtomicU64,
    reason: AtomicU8,
    stop: CancellationToken,
    max_errors: Option<u64>,
    /// When the first step's connections were open and its first request
    /// was due (Unix ns; 0 until then): what a fault's `at` counts from.
    began_unix_ns: AtomicU64,
}

impl Control {
    pub fn new(max_errors: Option<u64>) -> Self {
        Control {
            done: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            step: AtomicU64::new(0),
            reason: AtomicU8::new(0),
            stop: CancellationToken::new(),
            max_errors,
            began_unix_ns: AtomicU64::new(0),
        }
    }

    /// (requests done, errors, current step index).
    pub fn progress(&self) -> (u64, u64, u64) {
        (
            self.done.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
            self.step.load(Ordering::Relaxed),
        )
    }

    /// Stops sending; the first reason given is the one reported.
    pub fn stop(&self, reason: StopReason) {
        let _ = self
            .reason
            .compare_exchange(0, reason as u8, Ordering::AcqRel, Ordering::Acquire);
        self.stop.cancel();
    }

    pub fn stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    pub fn stop_token(&self) -> &CancellationToken {
        &self.stop
    }

    /// "", "stopped" or "max-errors".
    pub fn stopped(&self) -> &'static str {
        match self.reason.load(Ordering::Acquire) {
            1 => "stopped",
            2 => "max-errors",
            _ => "",
        }
    }

    /// Notes that sending began at `unix_ns` (the first call wins).
    pub fn begin(&self, unix_ns: i64) {
        let ns = u64::try_from(unix_ns).unwrap_or(1).max(1);
        let _ = self
            .began_unix_ns
            .compare_exchange(0, ns, Ordering::AcqRel, Ordering::Acquire);
    }

    /// When sending began (Unix ns), or None before.
    pub fn began(&self) -> Option<u64> {
        Some(self.began_unix_ns.load(Ordering::Acquire)).filter(|ns| *ns > 0)
    }

    pub fn set_step(&self, step: usize) {
        self.step.store(step as u64, Ordering::Relaxed);
    }

    /// Counts a finished request; past max_errors errors, the run stops itself.
    pub fn count(&self, error: bool) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if error {
            let errors = self.errors.fetch_add(1, Ordering::Relaxed) + 1;
            if self.max_errors.is_some_and(|max| errors > max) {
                self.stop(StopReason::MaxErrors);
            }
        }
    }
}

/// A run's records and how it ended.
#[derive(Debug)]
pub struct Finished {
    pub records: Records,
    /// What each watcher saw (runs with watchers only; boxed: most runs have none).
    pub watch: Option<Box<Watched>>,
    /// Every checked client's operations (runs with checked clients only).
    pub check: Option<Vec<CheckedOperation>>,
    /// What the workload counted beside the records, by name.
    pub counters: Vec<(&'static str, u64)>,
    /// Each compaction's start, end (unix ns) and revision.
    pub compactions: Vec<[i64; 3]>,
    /// What each informer did and saw.
    pub informed: Vec<crate::driver::informer::Informed>,
    /// Events seen expiring: each second's start (unix ns) and how many.
    pub expirations: Vec<[i64; 2]>,
    /// Every lock held (see `pacing::Recorded::holds`).
    pub holds: Vec<[i64; 7]>,
    /// Each expiry carried out (see `pacing::Recorded::expired`).
    pub expired: Vec<[i64; 4]>,
    /// "", "stopped" or "max-errors".
    pub stopped: &'static str,
}

/// What `take()` finds.
#[derive(Debug)]
pub enum Taken {
    Running,
    Failed(EngineError),
    /// Boxed: the records' columns make it far bigger than the others.
    Finished(Box<Finished>),
    /// The records were handed over already.
    Gone,
}

enum State {
    Running,
    Failed(EngineError),
    Finished(Box<Finished>),
    Gone,
}

struct Ending {
    state: Mutex<State>,
    changed: Condvar,
}

/// A running (or finished) load.
pub struct Engine {
    control: Arc<Control>,
    ending: Arc<Ending>,
}

impl Engine {
    /// Spawns the engine thread and returns at once.
    pub fn start_with<P: Protocol>(
        plan: Plan,
        options: P::Options,
        workload: Workload,
        records: Records,
    ) -> Result<Engine, EngineError> {
        // The one anchor between wall clock and monotonic time for the whole run.
        let clock = Clock::new();
        let control = Arc::new(Control::new(plan.max_errors));
        let ending = Arc::new(Ending {
            state: Mutex::new(State::Running),
            changed: Condvar::new(),
        });
        let thread_control = control.clone();
        let thread_ending = ending.clone();
        std::thread::Builder::new()
            .name("dbtester-engine".into())
            .spawn(move || {
                let (result, runtime) = drive::<P>(
                    plan,
                    options,
                    thread_control.clone(),
                    workload,
                    records,
                    clock,
                );
                let state = match result {
                    Ok(recorded) => State::Finished(Box::new(Finished {
                        records: recorded.records,
                        watch: recorded.watch.map(Box::new),
                        check: recorded.check,
                        counters: recorded.counters,
                        compactions: recorded.compactions,
                        informed: recorded.informed,
                        expirations: recorded.expirations,
                        holds: recorded.holds,
                        expired: recorded.expired,
                        stopped: thread_control.stopped(),
                    })),
                    Err(error) => State::Failed(error),
                };
                *lock(&thread_ending.state) = state;
                thread_ending.changed.notify_all();
                // After publishing: Python need not wait for the teardown.
                if let Some(runtime) = runtime {
                    runtime.shutdown_timeout(SHUTDOWN);
                }
            })
            .map_err(|e| EngineError(format!("cannot start the engine thread: {e}")))?;
        Ok(Engine { control, ending })
    }

    pub fn progress(&self) -> (u64, u64, u64) {
        self.control.progress()
    }

    pub fn began(&self) -> Option<u64> {
        self.control.began()
    }

    pub fn stop(&self) {
        self.control.stop(StopReason::Stopped);
    }

    /// Blocks up to `timeout` (None: until done); true once finished.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut state = lock(&self.ending.state);
        loop {
            if !matches!(*state, State::Running) {
                return true;
            }
            match deadline {
                None => {
                    state = self
                        .ending
                        .changed
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    state = self
                        .ending
                        .changed
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
    }

    /// Hands the records over (once); an engine failure stays readable.
    pub fn take(&self) -> Taken {
        let mut state = lock(&self.ending.state);
        match &*state {
            State::Running => Taken::Running,
            State::Failed(error) => Taken::Failed(error.clone()),
            State::Gone => Taken::Gone,
            State::Finished(_) => match std::mem::replace(&mut *state, State::Gone) {
                State::Finished(finished) => Taken::Finished(finished),
                _ => unreachable!(),
            },
        }
    }
}

impl Drop for Engine {
    /// A load nobody holds any more must not go on loading the database.
    fn drop(&mut self) {
        self.control.stop(StopReason::Stopped);
    }
}

/// Runs the whole plan on a fresh runtime; returns the runtime for teardown.
fn drive<P: Protocol>(
    plan: Plan,
    options: P::Options,
    control: Arc<Control>,
    workload: Workload,
    records: Records,
    clock: Clock,
) -> (
    Result<pacing::Recorded, EngineError>,
    Option<tokio::runtime::Runtime>,
) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(plan.threads)
        .thread_name("dbtester-worker")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let error = EngineError(format!("cannot start the tokio runtime: {e}"));
            return (Err(error), None);
        }
    };
    // Spawned, not run in block_on, so it runs on the worker threads like
    // everything it spawns (block_on would add this thread as one more).
    let run = runtime.spawn(pacing::run::<P>(
        Arc::new(plan),
        options,
        control,
        workload,
        records,
        clock,
    ));
    let result = match runtime.block_on(run) {
        Ok(result) => result,
        Err(e) => Err(EngineError(format!("the engine crashed: {e}"))),
    };
    (result, Some(runtime))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_errors_stops_once_exceeded() {
        let control = Control::new(Some(2));
        control.count(true);
        control.count(false);
        control.count(true);
        assert!(!control.stopping());
        control.count(true);
        assert!(control.stopping());
        assert_eq!(control.stopped(), "max-errors");
        control.stop(StopReason::Stopped); // the first reason stays
        assert_eq!(control.stopped(), "max-errors");
        assert_eq!(control.progress(), (4, 3, 0));
    }

    /// A write run then a read run against a real server, when one is named:
    /// `DBTESTER_ETCD=127.0.0.1:2379 cargo test -- --ignored` (likewise
    /// DBTESTER_ZOOKEEPER, DBTESTER_CONSUL).
    fn live<P: Protocol>(options: P::Options, variable: &str) {
        use crate::plan::Step;
        use crate::workload::{Mix, OpKind};
        let protocol = P::NAME;
        let endpoint = std::env::var(variable)
            .unwrap_or_else(|_| panic!("set {variable}=host:port to run this test"));
        let step = |requests: u64, rate: f64| Step {
            clients: 20,
            connections: 4,
            requests,
            rate,
        };
        for kind in [OpKind::Insert, OpKind::Read] {
            let mut plan = crate::plan::tests::good_plan();
            plan.protocol = protocol.into();
            plan.endpoints = vec![crate::plan::parse_endpoint(&endpoint).unwrap()];
            plan.key_size = 12;
            plan.value_size = 100;
            plan.keys.insert_space = 3000;
            plan.keys.existing = 1;
            plan.keys.choose = "same".into();
            plan.mix = Mix::plan_only(kind);
            plan.steps = vec![step(2000, 0.0), step(1000, 1000.0)];
            let records = Records::with_capacity(plan.total_requests()).unwrap();
            let workload = Workload::new(&plan).unwrap();
            let engine = Engine::start_with::<P>(plan, options.clone(), workload, records).unwrap();
            assert!(engine.wait(Some(Duration::from_secs(120))));
            let finished = match engine.take() {
                Taken::Finished(finished) => finished,
                other => panic!("{protocol:?} {kind:?}: {other:?}"),
            };
            let records = finished.records;
            assert_eq!(records.due_ns.len(), 3000);
            // Re-running creates ZooKeeper nodes that exist already.
            let names = records.codes.names();
            assert!(
                records
                    .code
                    .iter()
                    .all(|c| matches!(names[*c as usize].as_str(), "ok" | "NodeExists")),
                "{protocol:?} {kind:?}: {names:?}"
            );
        }
    }

    #[test]
    #[ignore = "needs a live etcd: set DBTESTER_ETCD=host:port"]
    fn live_etcd() {
        use crate::protocols::etcd::{Balancer, Etcd, Options};
        live::<Etcd>(
            Options {
                balancer: Balancer::PickFirst,
                auth: None,
            },
            "DBTESTER_ETCD",
        );
    }

    #[test]
    #[ignore = "needs a live ZooKeeper: set DBTESTER_ZOOKEEPER=host:port"]
    fn live_zookeeper() {
        use crate::protocols::zookeeper::{Options, ZooKeeper};
        live::<ZooKeeper>(
            Options {
                session_timeout: Duration::from_secs(30),
                tls: None,
                digest: None,
                detached: false,
                resume: None,
            },
            "DBTESTER_ZOOKEEPER",
        );
    }

    #[test]
    #[ignore = "needs a live Consul: set DBTESTER_CONSUL=host:port"]
    fn live_consul() {
        use crate::protocols::consul::{Consul, Options};
        live::<Consul>(Options::default(), "DBTESTER_CONSUL");
    }

    #[test]
    fn no_limit_never_stops() {
        let control = Control::new(None);
        for _ in 0..1000 {
            control.count(true);
        }
        assert!(!control.stopping());
        assert_eq!(control.stopped(), "");
    }
}
