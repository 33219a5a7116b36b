//! Locks contended for (`type: lock`): which lock each acquisition takes,
//! and what every holder did, for the check (no two holders of a lock at
//! once, each holder's fencing token above the last one's) and the figures
//! (handover, wait fairness); and which holders are to crash (the plan's
//! `expire`), and which did.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::plan::{Expiry, LockPlan};

/// The records' operation code of an acquisition (after Kubernetes' verbs),
/// and its name.
pub const ACQUIRE: (u8, &str) = (9, "acquire");

/// One acquisition: lock `lock`, held by locker `locker` from the moment its
/// acquire's reply arrived (`acquired`) to the moment it began its release
/// (`released`; None: it never did, its session ended first), with the
/// fencing token the database gave. `asked` is when its acquire began. A
/// holder that `crashed` held it until then (`released`), released nothing,
/// and left its session to expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub lock: u64,
    pub locker: u32,
    pub asked: Instant,
    pub acquired: Instant,
    pub released: Option<Instant>,
    pub token: i64,
    pub crashed: bool,
}

/// A holder that crashed: which of the plan's expiries made it, the lock,
/// the locker and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crash {
    pub expiry: usize,
    pub lock: u64,
    pub locker: u32,
    pub at: Instant,
}

/// The run's locks and what was done with them.
#[derive(Debug)]
pub struct Locks {
    plan: LockPlan,
    seed: u64,
    holds: Mutex<Vec<Hold>>,
    /// Sessions (etcd: leases) the lockers opened.
    sessions: AtomicU64,
    /// Releases that failed: the lock went only when its session did.
    failed_releases: AtomicU64,
    /// Expiries due and not yet carried out: (index in the plan, lock).
    doomed: Mutex<Vec<(usize, u64)>>,
    /// Wakes the holders when an expiry falls due.
    due: Notify,
    crashes: Mutex<Vec<Crash>>,
}

impl Locks {
    pub fn new(plan: &LockPlan, seed: u64) -> Locks {
        Locks {
            plan: plan.clone(),
            seed,
            holds: Mutex::new(Vec::new()),
            sessions: AtomicU64::new(0),
            failed_releases: AtomicU64::new(0),
            doomed: Mutex::new(Vec::new()),
            due: Notify::new(),
            crashes: Mutex::new(Vec::new()),
        }
    }

    /// The crashes the plan asks for, in time order.
    pub fn expiries(&self) -> &[Expiry] {
        &self.plan.expire
    }

    /// Expiry `i` is due: the holder of its lock, or the next one to take
    /// it, is to crash.
    pub fn doom(&self, i: usize) {
        guard(&self.doomed).push((i, self.plan.expire[i].lock));
        self.due.notify_waiters();
    }

    /// Resolves when an expiry falls due (take it before looking with
    /// `crash_due`, so that none falls between).
    pub fn due(&self) -> tokio::sync::futures::Notified<'_> {
        self.due.notified()
    }

    /// Claims the earliest expiry due on `lock` for its holder, if any.
    pub fn crash_due(&self, lock: u64) -> Option<usize> {
        let mut doomed = guard(&self.doomed);
        let at = doomed.iter().position(|&(_, l)| l == lock)?;
        Some(doomed.remove(at).0)
    }

    pub fn crashed(&self, crash: Crash) {
        guard(&self.crashes).push(crash);
    }

    /// Every crash carried out, in the order they were.
    pub fn take_crashes(&self) -> Vec<Crash> {
        std::mem::take(&mut *guard(&self.crashes))
    }

    /// How long each acquisition holds its lock.
    pub fn hold(&self) -> Duration {
        self.plan.hold
    }

    pub fn ttl_s(&self) -> i64 {
        self.plan.ttl_s
    }

    /// The lock acquisition `r` takes: drawn evenly from the plan's locks,
    /// by the run's seed and `r` alone.
    pub fn draw(&self, r: u64) -> u64 {
        if self.plan.count == 1 {
            return 0;
        }
        mixed(self.seed ^ mixed(r)) % self.plan.count
    }

    /// Lock `n`'s name: `<prefix>lock-<n>/`, under which the recipes make
    /// their keys or nodes.
    pub fn name_into(&self, n: u64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(self.plan.prefix.as_bytes());
        out.extend_from_slice(format!("lock-{n}/").as_bytes());
    }

    pub fn session_opened(&self) {
        self.sessions.fetch_add(1, Ordering::Relaxed);
    }

    pub fn held(&self, hold: Hold) {
        self.holds().push(hold);
    }

    pub fn release_failed(&self) {
        self.failed_releases.fetch_add(1, Ordering::Relaxed);
    }

    /// Every acquisition, in the order they were recorded.
    pub fn take_holds(&self) -> Vec<Hold> {
        std::mem::take(&mut *self.holds())
    }

    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("lock_sessions", self.sessions.load(Ordering::Relaxed)),
            (
                "failed_releases",
                self.failed_releases.load(Ordering::Relaxed),
            ),
        ]
    }

    fn holds(&self) -> MutexGuard<'_, Vec<Hold>> {
        guard(&self.holds)
    }
}

fn guard<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A 64-bit mix (splitmix64's finaliser): neighbouring inputs land far apart.
fn mixed(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locks(count: u64) -> Locks {
        Locks::new(
            &LockPlan {
                prefix: "/dbtester-locks/".into(),
                count,
                hold: Duration::from_millis(5),
                ttl_s: 10,
                expire: vec![
                    Expiry {
                        at: Duration::from_secs(1),
                        lock: 2,
                    },
                    Expiry {
                        at: Duration::from_secs(2),
                        lock: 2,
                    },
                ],
            },
            7,
        )
    }

    #[test]
    fn acquisitions_spread_over_the_locks_and_names_end_in_a_slash() {
        let l = locks(4);
        let mut seen = [0u32; 4];
        for r in 0..4000 {
            seen[l.draw(r) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
        assert_eq!(l.draw(17), l.draw(17));
        let mut name = Vec::new();
        l.name_into(3, &mut name);
        assert_eq!(name, b"/dbtester-locks/lock-3/");
        assert!((0..100).all(|r| locks(1).draw(r) == 0));
    }

    #[test]
    fn each_expiry_due_crashes_one_holder_of_its_lock() {
        let l = locks(4);
        assert_eq!(l.crash_due(2), None); // none due yet
        l.doom(1);
        l.doom(0);
        assert_eq!(l.crash_due(1), None); // another lock's holder is spared
        assert_eq!(l.crash_due(2), Some(1)); // in the order they fell due
        assert_eq!(l.crash_due(2), Some(0));
        assert_eq!(l.crash_due(2), None); // each claimed once
    }
}
