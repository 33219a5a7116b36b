//! Waiting for an open-loop request's due time to within tens of
//! microseconds. tokio's timers count whole milliseconds: a `sleep_until`
//! ends at the first millisecond tick after its deadline, and the
//! `epoll_wait` a worker parks in rounds its timeout up to a millisecond, so
//! a request left 1.3-1.4 ms after it was due on average and every
//! open-loop latency carried that lag as if the database had it. A timerfd
//! registered with tokio's reactor (AsyncFd) wakes the same `epoll_wait` at
//! the kernel's hrtimer resolution instead: one `timerfd_settime` and one
//! `read` a request.
//!
//! A thread woken by the timerfd still takes tens, sometimes hundreds, of
//! microseconds to run again (an idle core waking, the scheduler): at 200
//! requests/s on a 1-member etcd the send lag's p99 was 0.34 ms. So the open
//! loop may spend the last stretch before a due time yielding and reading the
//! clock instead of sleeping (`wait_spinning`): spinning through the last
//! 2 ms took the p99 to 0.023 ms but cost 0.5-1.4 ms of CPU a request; the
//! pacing keeps the stretch to a twentieth of the interval between requests.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// Sleeps until `due`; false if stopped first. Timers may round, so the
/// clock decides: this returns true only once `Instant::now() >= due`.
pub async fn wait_until(timer: &mut Timer, due: Instant, stop: &CancellationToken) -> bool {
    wait_spinning(timer, due, Duration::ZERO, stop).await
}

/// As `wait_until`, but the last `spin` before `due` is spent yielding to the
/// runtime (other tasks still run) and reading the clock rather than asleep.
pub async fn wait_spinning(
    timer: &mut Timer,
    due: Instant,
    spin: Duration,
    stop: &CancellationToken,
) -> bool {
    loop {
        if stop.is_cancelled() {
            return false;
        }
        let Some(left) = left(due, Instant::now()) else {
            return true;
        };
        if left <= spin {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => return false,
            () = timer.sleep(left - spin, due - spin) => {}
        }
    }
}

/// What is left until `due` at `now`; None once it is due.
fn left(due: Instant, now: Instant) -> Option<Duration> {
    due.checked_duration_since(now).filter(|d| !d.is_zero())
}

#[cfg(target_os = "linux")]
pub use linux::Timer;

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::{Duration, Instant};

    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;

    /// A monotonic timerfd on the runtime's reactor; without one (the
    /// kernel refused it), tokio's own timer.
    pub struct Timer {
        fd: Option<AsyncFd<OwnedFd>>,
    }

    impl Timer {
        /// Must be called on a tokio runtime with IO enabled.
        pub fn new() -> Timer {
            Timer { fd: timerfd().ok() }
        }

        /// Sleeps `left` (the time until `due`), or returns early on a
        /// spurious wake: the caller checks the clock.
        pub async fn sleep(&mut self, left: Duration, due: Instant) {
            let Some(fd) = &self.fd else {
                return tokio::time::sleep_until(due.into()).await;
            };
            if arm(fd.as_raw_fd(), left).is_err() {
                return tokio::time::sleep_until(due.into()).await;
            }
            loop {
                let Ok(mut ready) = fd.readable().await else {
                    return tokio::time::sleep_until(due.into()).await;
                };
                match ready.try_io(|fd| expirations(fd.as_raw_fd())) {
                    Ok(_) => {
                        // The expiration is read: the fd is not readable
                        // until the next arm, so no stale wake is left.
                        ready.clear_ready();
                        return;
                    }
                    // A readiness left from an earlier sleep (cut short by a
                    // stop, or re-armed): wait for this one.
                    Err(_would_block) => {}
                }
            }
        }
    }

    fn timerfd() -> io::Result<AsyncFd<OwnedFd>> {
        // SAFETY: timerfd_create takes no pointers; a non-negative result is
        // a new descriptor that nothing else owns.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: the AsyncFd owns `fd`, which stays open and the same
        // descriptor until the AsyncFd is dropped.
        Ok(unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?)
    }

    /// Arms the timer to expire once, `left` from now (relative: std's
    /// Instant and the timerfd share CLOCK_MONOTONIC, and the expiry cannot
    /// come before `now + left`). Arming also discards an expiration not read.
    fn arm(fd: i32, left: Duration) -> io::Result<()> {
        // A zero it_value would disarm: at least a nanosecond.
        let left = left.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
                tv_nsec: left.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` lives across the call; a null old_value is allowed.
        let result = unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads the expiration count (WouldBlock when none is pending).
    fn expirations(fd: i32) -> io::Result<u64> {
        let mut count = 0u64;
        // SAFETY: reads at most 8 bytes into `count`, which is 8 bytes long.
        let n = unsafe { libc::read(fd, (&raw mut count).cast(), size_of::<u64>()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(count)
    }
}

/// Elsewhere: tokio's timer, to the millisecond.
#[cfg(not(target_os = "linux"))]
pub struct Timer;

#[cfg(not(target_os = "linux"))]
impl Timer {
    pub fn new() -> Timer {
        Timer
    }

    pub async fn sleep(&mut self, _left: Duration, due: Instant) {
        tokio::time::sleep_until(due.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn never_returns_before_due() {
        runtime().block_on(async {
            let mut timer = Timer::new();
            let stop = CancellationToken::new();
            for micros in [0, 1, 50, 300, 1_700, 4_000] {
                let due = Instant::now() + Duration::from_micros(micros);
                assert!(wait_until(&mut timer, due, &stop).await);
                assert!(Instant::now() >= due, "{micros} us");
            }
            // Already past: at once.
            assert!(wait_until(&mut timer, Instant::now() - Duration::from_secs(1), &stop).await);
        });
    }

    /// Unlike tokio's timer, well within a millisecond of the due time
    /// (the median of 200 waits, so a busy machine's odd late wake does not
    /// fail it).
    #[cfg(target_os = "linux")]
    #[test]
    fn wakes_well_within_a_millisecond() {
        runtime().block_on(async {
            let mut timer = Timer::new();
            let stop = CancellationToken::new();
            let mut late = Vec::new();
            for _ in 0..200 {
                let due = Instant::now() + Duration::from_micros(700);
                assert!(wait_until(&mut timer, due, &stop).await);
                late.push(Instant::now() - due);
            }
            late.sort_unstable();
            assert!(
                late[100] < Duration::from_micros(400),
                "median {:?}",
                late[100]
            );
        });
    }

    #[test]
    fn spinning_never_returns_before_due_and_a_stop_ends_it() {
        runtime().block_on(async {
            let mut timer = Timer::new();
            let stop = CancellationToken::new();
            for micros in [0, 30, 250, 1_500] {
                let due = Instant::now() + Duration::from_micros(micros);
                let spin = Duration::from_micros(200);
                assert!(wait_spinning(&mut timer, due, spin, &stop).await);
                assert!(Instant::now() >= due, "{micros} us");
            }
            stop.cancel();
            let due = Instant::now() + Duration::from_micros(100);
            assert!(!wait_spinning(&mut timer, due, Duration::from_millis(1), &stop).await);
        });
    }

    #[test]
    fn a_stop_ends_the_wait() {
        runtime().block_on(async {
            let mut timer = Timer::new();
            let stop = CancellationToken::new();
            let far = Instant::now() + Duration::from_secs(60);
            let stopper = stop.clone();
            let started = Instant::now();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                stopper.cancel();
            });
            assert!(!wait_until(&mut timer, far, &stop).await);
            assert!(started.elapsed() < Duration::from_secs(5));
            // The cut-short sleep's timer leaves nothing stale behind.
            let stop = CancellationToken::new();
            let due = Instant::now() + Duration::from_millis(2);
            assert!(wait_until(&mut timer, due, &stop).await);
            assert!(Instant::now() >= due);
        });
    }

    #[test]
    fn what_is_left() {
        let now = Instant::now();
        assert_eq!(left(now, now), None);
        assert_eq!(left(now, now + Duration::from_nanos(1)), None);
        assert_eq!(
            left(now + Duration::from_micros(5), now),
            Some(Duration::from_micros(5))
        );
    }
}
