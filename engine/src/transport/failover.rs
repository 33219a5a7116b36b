//! How a connection uses every endpoint of the cluster, as a real client given
//! all of them does (etcd's clientv3 balancers, a Consul client with several
//! servers): its own endpoint first, the others after it; on to the next when
//! one refuses; back home once home accepts again; and a short backoff when
//! none accepts.
//!
//! Without this a connection pinned to a dead member fails fast on every
//! request, so its clients are always free and, in an open loop, take nearly
//! every due request while the live members' clients wait on real replies:
//! the numbers would measure the engine, not the database.

use std::time::{Duration, Instant};

use std::future::Future;
use std::sync::Weak;

use crate::plan::Endpoint;

/// How often a connection away from its own endpoint tries to go back to it
/// (gRPC's round_robin reconnects to a restarted backend within about this).
pub const HOME_RETRY: Duration = Duration::from_secs(1);

/// The longest a dial (TCP connect and handshake) may take: a paused member
/// (its kernel still accepts TCP) or a partition that drops packets must not
/// hold every redial for the whole request timeout.
const MAX_DIAL: Duration = Duration::from_secs(1);

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The bound on one dial for a plan whose requests time out after `timeout`.
pub fn dial_bound(timeout: Duration) -> Duration {
    timeout.min(MAX_DIAL)
}

/// A connection that can be away from its own endpoint (gRPC's and
/// HTTP/1.1's), and the steps of bringing it back.
pub trait Homing: Send + Sync + 'static {
    type Link: Send;
    /// What dialling home takes: the own endpoint, and whatever a new
    /// connection does before it is used (gRPC's login).
    type Home: Send + Sync;

    /// How to dial home and the bound on doing it while away; None once
    /// home (bringing it back is then over).
    fn away(&self) -> impl Future<Output = Option<(Self::Home, Duration)>> + Send;

    /// A new connection home; None when it does not accept.
    fn dial(home: &Self::Home) -> impl Future<Output = Option<Self::Link>> + Send;

    /// Makes `link` (home) the connection, if still away; bringing it back is over.
    fn arrive(&self, link: Self::Link) -> impl Future<Output = ()> + Send;
}

/// Every HOME_RETRY, dials the own endpoint; once it accepts, the connection
/// moves there. Ends when home or when the connection is gone; holds no
/// strong reference while it waits, so dropping the connection closes it.
pub async fn go_home<H: Homing>(conn: Weak<H>) {
    loop {
        tokio::time::sleep(HOME_RETRY).await;
        let away = match conn.upgrade() {
            Some(conn) => conn.away().await,
            None => return,
        };
        let Some((home, bound)) = away else {
            return;
        };
        let Ok(Some(link)) = tokio::time::timeout(bound, H::dial(&home)).await else {
            continue;
        };
        if let Some(conn) = conn.upgrade() {
            conn.arrive(link).await;
        }
        return;
    }
}

/// `home` first, then the other endpoints in the plan's order after it
/// (wrapping round): connection c of a 3-member round robin on member 1 gets
/// [1, 2, 0].
pub fn ordered(endpoints: &[Endpoint], home: usize) -> Vec<Endpoint> {
    let n = endpoints.len();
    (0..n).map(|i| endpoints[(home + i) % n].clone()).collect()
}

/// The endpoints' order starting from `home`'s index among `endpoints` (the
/// leader balancer's endpoint is one of them; if not, it alone).
pub fn ordered_from(endpoints: &[Endpoint], home: &Endpoint) -> Vec<Endpoint> {
    match endpoints.iter().position(|e| e == home) {
        Some(at) => ordered(endpoints, at),
        None => vec![home.clone()],
    }
}

/// After every endpoint refused: how long to fail requests at once before
/// dialling again. A gRPC channel in TRANSIENT_FAILURE fails a fail-fast call
/// immediately in the same way rather than dial for each one; dialling per
/// request at the full offered rate would load the machine (and the dead
/// members' neighbours) with connection attempts instead of requests.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    until: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            next: FIRST_BACKOFF,
            until: None,
        }
    }
}

impl Backoff {
    /// Whether requests fail without a dial at `now`.
    pub fn waiting(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// Every endpoint refused at `now`: wait, and wait longer next time.
    pub fn failed(&mut self, now: Instant) {
        self.until = Some(now + self.next);
        self.next = (self.next * 2).min(MAX_BACKOFF);
    }

    /// A dial succeeded: the next failure starts from the first step again.
    pub fn succeeded(&mut self) {
        *self = Backoff::default();
    }
}

/// The error of a dial through the list: each endpoint's own, joined.
pub fn none_accepted(errors: &[(String, String)]) -> String {
    match errors {
        [(_, only)] => only.clone(),
        _ => {
            let each: Vec<String> = errors.iter().map(|(a, e)| format!("{a}: {e}")).collect();
            format!("no endpoint accepted a connection ({})", each.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::parse_endpoint;

    #[test]
    fn own_endpoint_first_then_the_others_after_it() {
        let all: Vec<Endpoint> = ["a:1", "b:2", "c:3"]
            .iter()
            .map(|e| parse_endpoint(e).unwrap())
            .collect();
        let names = |list: Vec<Endpoint>| {
            list.into_iter()
                .map(|e| e.authority)
                .collect::<Vec<_>>()
                .join(",")
        };
        assert_eq!(names(ordered(&all, 0)), "a:1,b:2,c:3");
        assert_eq!(names(ordered(&all, 1)), "b:2,c:3,a:1");
        assert_eq!(names(ordered(&all, 2)), "c:3,a:1,b:2");
        assert_eq!(names(ordered_from(&all, &all[2])), "c:3,a:1,b:2");
        let other = parse_endpoint("d:4").unwrap();
        assert_eq!(names(ordered_from(&all, &other)), "d:4");
    }

    #[test]
    fn backoff_grows_to_a_second_and_resets_on_success() {
        let mut backoff = Backoff::default();
        let now = Instant::now();
        assert!(!backoff.waiting(now));
        backoff.failed(now);
        assert!(backoff.waiting(now + Duration::from_millis(49)));
        assert!(!backoff.waiting(now + Duration::from_millis(50)));
        for _ in 0..10 {
            backoff.failed(now);
        }
        assert!(backoff.waiting(now + Duration::from_millis(999)));
        assert!(!backoff.waiting(now + Duration::from_secs(1)));
        backoff.succeeded();
        assert!(!backoff.waiting(now));
        backoff.failed(now);
        assert!(!backoff.waiting(now + Duration::from_millis(50)));
        assert_eq!(dial_bound(Duration::from_millis(300)).as_millis(), 300);
        assert_eq!(dial_bound(Duration::from_secs(5)).as_millis(), 1000);
    }
}
