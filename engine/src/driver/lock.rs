//! Locks taken through a protocol's recipe (`type: lock`): each client is a
//! locker with a session of its own, opened before the load and closed
//! after it. An acquisition is timed from its due time (or its send, in a
//! closed loop) to the reply that says the lock is held; then the locker
//! holds it for the plan's hold time and releases it, and only then takes
//! its next acquisition. Every hold is kept for the check.
//!
//! A holder whose lock an expiry falls due on (the plan's `expire`) crashes
//! instead of releasing: it stops where it is, and comes back as a restarted
//! client would, its old session left to expire and a new one opened.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{join_all, try_join_all};
use tokio_util::sync::CancellationToken;

use crate::outcome::{EngineError, Outcome};
use crate::protocols::Protocol;
use crate::workload::Workload;
use crate::workload::lock::{Crash, Hold, Locks};

/// The records' operation code of an acquisition.
pub const ACQUIRE: u8 = crate::workload::lock::ACQUIRE.0;

/// One session for each of `lockers` lockers, locker c's on connection
/// c % `connections`, all opened before the first acquisition is due.
pub async fn open_sessions<P: Protocol>(
    proto: &P,
    locks: &Locks,
    lockers: usize,
    connections: usize,
) -> Result<Vec<P::Session>, EngineError> {
    let opened = try_join_all((0..lockers).map(|c| async move {
        proto
            .open_session(c % connections, locks.ttl_s())
            .await
            .map_err(|outcome| {
                EngineError(format!(
                    "locker {c} could not open its session: {}",
                    outcome.name()
                ))
            })
    }))
    .await?;
    for _ in &opened {
        locks.session_opened();
    }
    Ok(opened)
}

/// Ends every locker's session.
pub async fn close_sessions<P: Protocol>(proto: &P, sessions: Vec<P::Session>, connections: usize) {
    join_all(
        sessions
            .into_iter()
            .enumerate()
            .map(|(c, session)| proto.close_session(c % connections, session)),
    )
    .await;
}

/// What one acquisition did: its outcome, when its acquire was sent, and
/// when its reply came (the record's end).
pub struct Acquisition {
    pub outcome: Outcome,
    pub sent: Instant,
    pub end: Instant,
    /// The holder crashed: its session is to be abandoned (`restart`).
    pub crashed: bool,
}

/// Acquisition `r` by locker `locker` over connection `conn`: acquires the
/// lock `r` draws within `timeout`, holds it, releases it. An acquire that
/// fails or times out withdraws the locker's claim, so that no lock waits
/// on a locker that gave up. `cancel` cuts the acquire and the hold short.
#[allow(clippy::too_many_arguments)]
pub async fn perform<P: Protocol>(
    proto: &P,
    conn: usize,
    session: &P::Session,
    locks: &Locks,
    r: u64,
    locker: u32,
    timeout: Duration,
    cancel: &CancellationToken,
    name: &mut Vec<u8>,
) -> Acquisition {
    let lock = locks.draw(r);
    locks.name_into(lock, name);
    let sent = Instant::now();
    let acquired = tokio::select! {
        biased;
        reply = tokio::time::timeout(timeout, proto.acquire(conn, session, name)) => {
            reply.unwrap_or(Err(Outcome::Timeout))
        }
        () = cancel.cancelled() => Err(Outcome::Cancelled),
    };
    let end = Instant::now();
    let held = match acquired {
        Ok(held) => held,
        Err(outcome) => {
            let _ = tokio::time::timeout(timeout, proto.withdraw(conn, session, name)).await;
            return Acquisition {
                outcome,
                sent,
                end,
                crashed: false,
            };
        }
    };
    // A holder that crashes holds until then and releases nothing.
    let crash = hold_or_crash(locks, lock, cancel).await;
    let released = Instant::now();
    if crash.is_none() {
        let release = tokio::time::timeout(timeout, proto.release(conn, session, &held)).await;
        if !matches!(release, Ok(Ok(()))) {
            locks.release_failed();
        }
    }
    locks.held(Hold {
        lock,
        locker,
        asked: sent,
        acquired: end,
        released: Some(released),
        token: held.token,
        crashed: crash.is_some(),
    });
    if let Some(expiry) = crash {
        locks.crashed(Crash {
            expiry,
            lock,
            locker,
            at: released,
        });
    }
    Acquisition {
        outcome: Outcome::Ok,
        sent,
        end,
        crashed: crash.is_some(),
    }
}

/// Holds `lock` for the plan's hold time (or until `cancel`); Some(expiry)
/// when an expiry falls due on it first, and its holder is to crash.
async fn hold_or_crash(locks: &Locks, lock: u64, cancel: &CancellationToken) -> Option<usize> {
    let until = tokio::time::Instant::now() + locks.hold();
    loop {
        let due = locks.due();
        tokio::pin!(due);
        due.as_mut().enable(); // from here on no expiry falls due unseen
        if let Some(expiry) = locks.crash_due(lock) {
            return Some(expiry);
        }
        tokio::select! {
            () = tokio::time::sleep_until(until) => return None,
            () = cancel.cancelled() => return None,
            () = &mut due => {}
        }
    }
}

/// A crashed locker as a restarted client: its old session left to expire
/// (`abandon_session`), a new one opened within `timeout` (None: none could
/// be, and the locker takes no more locks).
pub async fn restart<P: Protocol>(
    proto: &P,
    conn: usize,
    old: P::Session,
    locks: &Locks,
    timeout: Duration,
) -> Option<P::Session> {
    proto.abandon_session(conn, old).await;
    let fresh = tokio::time::timeout(timeout, proto.open_session(conn, locks.ttl_s()))
        .await
        .ok()?
        .ok()?;
    locks.session_opened();
    Some(fresh)
}

/// Makes each of the plan's expiries fall due at its moment after `start`
/// (the load's first due request).
pub async fn expire_on_time(workload: Arc<Workload>, start: Instant) {
    let Some(locks) = workload.locks() else {
        return;
    };
    for (i, expiry) in locks.expiries().iter().enumerate() {
        tokio::time::sleep_until((start + expiry.at).into()).await;
        locks.doom(i);
    }
}
