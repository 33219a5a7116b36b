//! Locks taken through a protocol's recipe (`type: lock`): each client is a
//! locker with a session of its own, opened before the load and closed
//! after it. An acquisition is timed from its due time (or its send, in a
//! closed loop) to the reply that says the lock is held; then the locker
//! holds it for the plan's hold time and releases it, and only then takes
//! its next acquisition. Every hold is kept for the check.

use std::time::{Duration, Instant};

use futures_util::future::{join_all, try_join_all};
use tokio_util::sync::CancellationToken;

use crate::outcome::{EngineError, Outcome};
use crate::protocols::Protocol;
use crate::workload::lock::{Hold, Locks};

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
            return Acquisition { outcome, sent, end };
        }
    };
    tokio::select! {
        () = tokio::time::sleep(locks.hold()) => {}
        () = cancel.cancelled() => {}
    }
    let released = Instant::now();
    let release = tokio::time::timeout(timeout, proto.release(conn, session, &held)).await;
    if !matches!(release, Ok(Ok(()))) {
        locks.release_failed();
    }
    locks.held(Hold {
        lock,
        locker,
        asked: sent,
        acquired: end,
        released: Some(released),
        token: held.token,
    });
    Acquisition {
        outcome: Outcome::Ok,
        sent,
        end,
    }
}
