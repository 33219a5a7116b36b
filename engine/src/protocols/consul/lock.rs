//! A lock on Consul as its API client's `Lock` takes one: each locker
//! creates a session with a TTL (and Consul's lock-delay, the plan's) and
//! renews it every half TTL; to acquire, it PUTs the lock's key with
//! `?acquire=<session>`, and while Consul answers "false" it waits with a
//! blocking query on the key until no session holds it (every waiter
//! blocks on the one key, so each release wakes them all and they race),
//! or, when no session holds it and the acquire still failed (a lock-delay
//! after a holder's session was invalidated), tries again after the
//! client's 5 s. Once held it reads the key (consistent) for its LockIndex,
//! the fencing token. Releasing PUTs `?release=<session>`.
//!
//! Renewals go over a connection of their own: HTTP/1.1 carries one request
//! at a time, and a locker's own connection may be blocked in a query for
//! longer than its TTL.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST};
use http::{Method, StatusCode};
use http_body_util::Full;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::outcome::Outcome;
use crate::protocols::Held;
use crate::transport::http1::Conn;

/// How long one blocking query on a held lock waits for its release.
const BLOCK: Duration = Duration::from_secs(5);
/// The API client's pause before it tries again an acquire that failed
/// though no session held the lock (DefaultLockRetryTime).
const LOCK_RETRY: Duration = Duration::from_secs(5);

/// A locker's session and the task renewing it.
pub struct LockSession {
    id: String,
    /// Set once a renewal found the session gone (404).
    lost: Arc<AtomicBool>,
    stop: CancellationToken,
    renewing: JoinHandle<()>,
}

fn request(conn: &Conn, method: Method, uri: &str, body: Bytes) -> http::Request<Full<Bytes>> {
    http::Request::builder()
        .method(method)
        .uri(uri)
        .header(HOST, conn.host.clone())
        .header(CONTENT_LENGTH, body.len())
        .body(Full::new(body))
        .expect("lock names and session ids make valid URIs")
}

/// The lock's key in the KV API: its name without the slashes around it.
fn key_path(name: &[u8]) -> Result<String, Outcome> {
    let name = std::str::from_utf8(name).map_err(|_| Outcome::Named("bad-lock-name"))?;
    Ok(format!("/v1/kv/{}", name.trim_matches('/')))
}

/// The session a `?consistent` read of the lock's key found holding it,
/// and the key's LockIndex (None: no such key yet).
fn holder(body: &[u8]) -> Option<(Option<String>, i64)> {
    let entries: serde_json::Value = serde_json::from_slice(body).ok()?;
    let entry = entries.as_array()?.first()?;
    let session = entry
        .get("Session")
        .and_then(|s| s.as_str())
        .map(String::from);
    Some((session, entry.get("LockIndex")?.as_i64()?))
}

fn consul_index(head: &http::response::Parts) -> u64 {
    head.headers
        .get("x-consul-index")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}

/// Creates a session of `ttl_s` with `lock_delay_s`, renewed over `renewer`.
pub async fn open(
    conn: &Arc<Conn>,
    renewer: &Arc<Conn>,
    ttl_s: i64,
    lock_delay_s: f64,
) -> Result<LockSession, Outcome> {
    let body = serde_json::json!({
        "Name": "dbtester lock",
        "TTL": format!("{ttl_s}s"),
        "LockDelay": format!("{}ms", (lock_delay_s * 1000.0).round() as u64),
        "Behavior": "release",
    });
    let create = request(
        conn,
        Method::PUT,
        "/v1/session/create",
        Bytes::from(body.to_string()),
    );
    let (status, reply) = conn.send(create, &mut Instant::now()).await?;
    if status != StatusCode::OK {
        return Err(Outcome::Http(status.as_u16()));
    }
    let id = serde_json::from_slice::<serde_json::Value>(&reply)
        .ok()
        .and_then(|v| Some(v.get("ID")?.as_str()?.to_owned()))
        .ok_or(Outcome::Named("no-session-id"))?;
    let lost = Arc::new(AtomicBool::new(false));
    let stop = CancellationToken::new();
    let every = Duration::from_secs_f64(ttl_s as f64 / 2.0);
    let renewing = tokio::spawn(renew(
        renewer.clone(),
        id.clone(),
        every,
        lost.clone(),
        stop.clone(),
    ));
    Ok(LockSession {
        id,
        lost,
        stop,
        renewing,
    })
}

/// Renews the session every `every`, as the API client's RenewPeriodic
/// does (every half TTL); a 404 means it is gone.
async fn renew(
    conn: Arc<Conn>,
    id: String,
    every: Duration,
    lost: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let uri = format!("/v1/session/renew/{id}");
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let renewal = request(&conn, Method::PUT, &uri, Bytes::new());
        if let Ok((StatusCode::NOT_FOUND, _)) = conn.send(renewal, &mut Instant::now()).await {
            lost.store(true, Ordering::Relaxed);
            return;
        }
    }
}

/// Stops the renewals and leaves the session to be invalidated when its
/// TTL runs out (Consul allows up to twice it); its lock then waits out the
/// lock-delay. Its connections are shared with other work and stay.
pub async fn abandon(session: LockSession) {
    session.stop.cancel();
    let _ = session.renewing.await;
}

/// Stops the renewals and destroys the session (its locks are released).
pub async fn close(conn: &Arc<Conn>, session: LockSession) {
    session.stop.cancel();
    let _ = session.renewing.await;
    let destroy = request(
        conn,
        Method::PUT,
        &format!("/v1/session/destroy/{}", session.id),
        Bytes::new(),
    );
    let _ = conn.send(destroy, &mut Instant::now()).await;
}

pub async fn acquire(
    conn: &Arc<Conn>,
    session: &LockSession,
    name: &[u8],
) -> Result<Held, Outcome> {
    let key = key_path(name)?;
    let take = format!("{key}?acquire={}", session.id);
    // The API client's loop: wait while a session holds the key (a blocking
    // query from the last index; the first read does not block), then try
    // to acquire; when that fails, read again at once to see why.
    let mut index = 0;
    loop {
        if session.lost.load(Ordering::Relaxed) {
            return Err(Outcome::Named("session-expired"));
        }
        let (held, at) = read(conn, &key, index).await?;
        if held {
            index = at;
            continue;
        }
        let put = request(conn, Method::PUT, &take, Bytes::new());
        match conn.send(put, &mut Instant::now()).await? {
            (StatusCode::OK, body) if body.trim_ascii() == b"true" => break,
            (StatusCode::OK, _) => {}
            (status, _) => return Err(Outcome::Http(status.as_u16())),
        }
        let (held, at) = read(conn, &key, 0).await?;
        if held {
            index = at;
        } else {
            // No session holds it, yet it was refused: a lock-delay.
            tokio::time::sleep(LOCK_RETRY).await;
            index = 0;
        }
    }
    let read = request(
        conn,
        Method::GET,
        &format!("{key}?consistent"),
        Bytes::new(),
    );
    let (status, body) = conn.send(read, &mut Instant::now()).await?;
    match (status, holder(&body)) {
        (StatusCode::OK, Some((Some(by), token))) if by == session.id => Ok(Held {
            key: Bytes::from(key),
            token,
        }),
        (StatusCode::OK, _) => Err(Outcome::Named("lock-lost")),
        (status, _) => Err(Outcome::Http(status.as_u16())),
    }
}

/// Whether a session holds the lock's key, and the index it was read at:
/// at once for `index` 0, else once the key's index passes it (or BLOCK).
async fn read(conn: &Arc<Conn>, key: &str, index: u64) -> Result<(bool, u64), Outcome> {
    let query = if index == 0 {
        String::new()
    } else {
        format!("?index={index}&wait={}s", BLOCK.as_secs())
    };
    let get = request(conn, Method::GET, &format!("{key}{query}"), Bytes::new());
    let (head, body) = conn.exchange(get, &mut Instant::now()).await?;
    let held = match head.status {
        StatusCode::OK => holder(&body).is_some_and(|(session, _)| session.is_some()),
        StatusCode::NOT_FOUND => false, // no key yet: nobody holds it
        status => return Err(Outcome::Http(status.as_u16())),
    };
    // Consul's advice: an index that went backwards starts again, never below 1.
    Ok((held, consul_index(&head).max(1)))
}

pub async fn release(conn: &Arc<Conn>, session: &LockSession, held: &Held) -> Result<(), Outcome> {
    let key = std::str::from_utf8(&held.key).map_err(|_| Outcome::Named("bad-lock-name"))?;
    let put = request(
        conn,
        Method::PUT,
        &format!("{key}?release={}", session.id),
        Bytes::new(),
    );
    match conn.send(put, &mut Instant::now()).await? {
        (StatusCode::OK, body) if body.trim_ascii() == b"true" => Ok(()),
        (StatusCode::OK, _) => Err(Outcome::Named("release-refused")),
        (status, _) => Err(Outcome::Http(status.as_u16())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_and_token_are_read_from_the_entry() {
        let held = br#"[{"Key":"l","LockIndex":7,"Session":"abc","ModifyIndex":40}]"#;
        assert_eq!(holder(held), Some((Some("abc".into()), 7)));
        let free = br#"[{"Key":"l","LockIndex":7,"ModifyIndex":41}]"#;
        assert_eq!(holder(free), Some((None, 7)));
        assert_eq!(holder(b"[]"), None);
        assert_eq!(
            key_path(b"/dbtester-locks/lock-2/").unwrap(),
            "/v1/kv/dbtester-locks/lock-2"
        );
    }
}
