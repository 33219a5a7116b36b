//! A lock on ZooKeeper as its recipe describes it (and Curator's
//! InterProcessMutex takes it): each contender creates an ephemeral
//! sequential node `lock-<sequence>` under the lock's node, lists the
//! children (without a watch), and holds the lock when its node has the
//! lowest sequence; otherwise it watches the node just below its own
//! (getData with a watch, as Curator does, so that a node already gone
//! leaves no watch behind) and lists again when that node goes. Each
//! release wakes one waiter. The node's sequence number is the fencing
//! token; the node goes with its session, which is the locker's own (its own
//! connection, detached: dropped, it is left to expire, as a crashed
//! client's is; closed, it is taken up again and ended).

use std::sync::Mutex;

use bytes::Bytes;
use zookeeper_client::{Acls, Client, CreateMode, Error};

use super::{Lockers, Options, end_sessions, outcome, session_on};
use crate::outcome::Outcome;
use crate::protocols::Held;

/// A locker's session: its client, and the node it made under a lock and
/// does not hold yet (for `withdraw`).
pub struct LockSession {
    client: Client,
    pending: Mutex<Option<String>>,
}

impl LockSession {
    pub(super) fn new(client: Client) -> LockSession {
        LockSession {
            client,
            pending: Mutex::new(None),
        }
    }
}

/// How long ending a locker's session may take after the load.
const CLOSE_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Ends the session: the detached client goes, and a client that takes the
/// session up again is dropped, which ends it (its nodes go with it).
pub(super) async fn close(session: LockSession, lockers: &Lockers) {
    let options = Options {
        detached: false,
        resume: Some(session.client.into_session()),
        ..lockers.options.clone()
    };
    if let Ok(client) = session_on(&lockers.endpoints, CLOSE_WITHIN, &options, 0).await {
        end_sessions(vec![client]).await;
    }
}

/// The sequential nodes' name before their sequence number.
const NODE: &str = "lock-";

/// The lock's node: its name without the trailing "/".
fn parent(name: &[u8]) -> Result<&str, Outcome> {
    let name = std::str::from_utf8(name).map_err(|_| Outcome::Named("bad-lock-name"))?;
    Ok(name.strip_suffix('/').unwrap_or(name))
}

/// The sequence number of a child named `lock-<sequence>`.
fn sequence(child: &str) -> Option<i64> {
    child.strip_prefix(NODE)?.parse().ok()
}

/// The sequence just below `mine` among `children`, None when `mine` is the
/// lowest; Err when `mine` is not among them (its session ended).
fn predecessor(children: &[String], mine: i64) -> Result<Option<i64>, Outcome> {
    let numbers: Vec<i64> = children.iter().filter_map(|c| sequence(c)).collect();
    if !numbers.contains(&mine) {
        return Err(Outcome::Named("SessionExpired"));
    }
    Ok(numbers.into_iter().filter(|&n| n < mine).max())
}

/// Makes the locker's node, and the lock's node (and its parents) first if
/// they are not there yet.
async fn create_node(client: &Client, parent: &str) -> Result<(String, i64), Outcome> {
    let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let prefix = format!("{parent}/{NODE}");
    let created = match client.create(&prefix, &[], &ephemeral).await {
        Err(Error::NoNode) => {
            let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
            match client.mkdir(parent, &persistent).await {
                Ok(()) | Err(Error::NodeExists) => {}
                Err(e) => return Err(outcome(&e)),
            }
            client.create(&prefix, &[], &ephemeral).await
        }
        created => created,
    };
    let (_, number) = created.map_err(|e| outcome(&e))?;
    let number = number.into_i64();
    Ok((format!("{prefix}{number:010}"), number))
}

pub(super) async fn acquire(session: &LockSession, name: &[u8]) -> Result<Held, Outcome> {
    let (client, pending) = (&session.client, &session.pending);
    let parent = parent(name)?;
    let (path, mine) = create_node(client, parent).await?;
    *lock(pending) = Some(path.clone());
    loop {
        let (children, _) = client.get_children(parent).await.map_err(|e| outcome(&e))?;
        let Some(before) = predecessor(&children, mine)? else {
            break;
        };
        let ahead = format!("{parent}/{NODE}{before:010}");
        match client.get_and_watch_data(&ahead).await {
            Ok((_, _, watcher)) => {
                watcher.changed().await;
            }
            Err(Error::NoNode) => {} // gone already: list again
            Err(e) => return Err(outcome(&e)),
        }
    }
    *lock(pending) = None;
    Ok(Held {
        key: Bytes::from(path),
        token: mine,
    })
}

pub(super) async fn release(session: &LockSession, held: &Held) -> Result<(), Outcome> {
    let path = std::str::from_utf8(&held.key).map_err(|_| Outcome::Named("bad-lock-name"))?;
    match session.client.delete(path, None).await {
        Ok(()) | Err(Error::NoNode) => Ok(()),
        Err(e) => Err(outcome(&e)),
    }
}

/// Deletes the node an acquire that failed or was given up left behind.
pub(super) async fn withdraw(session: &LockSession) {
    let path = lock(&session.pending).take();
    if let Some(path) = path {
        let _ = session.client.delete(&path, None).await;
    }
}

fn lock(pending: &Mutex<Option<String>>) -> std::sync::MutexGuard<'_, Option<String>> {
    pending
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_below_mine_is_the_one_watched() {
        let children: Vec<String> = ["lock-0000000007", "lock-0000000003", "lock-0000000012"]
            .map(String::from)
            .to_vec();
        assert_eq!(predecessor(&children, 12), Ok(Some(7)));
        assert_eq!(predecessor(&children, 3), Ok(None));
        assert!(predecessor(&children, 5).is_err()); // mine is gone
        assert_eq!(
            parent(b"/dbtester-locks/lock-2/"),
            Ok("/dbtester-locks/lock-2")
        );
        assert_eq!(sequence("other"), None);
    }
}
