//! Checked clients (`plan.check`): beside the measured load, each on a
//! connection of its own and one request at a time, they read and write a
//! few keys of their own and record every operation (invoked, completed,
//! outcome, value) on the engine's clock for a linearizability check. Every
//! write stores a value no other write stores: the client's number above
//! bit 40, its own count below. Their requests are in no figure of the load.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::outcome::{EngineError, Outcome};
use crate::plan::{CheckPlan, Plan, Step};
use crate::protocols::{Protocol, Request};
use crate::records::Clock;
use crate::workload::{OpKind, Workload};

/// A key's value before any write: absent.
pub const ABSENT: u64 = 0;
/// A read's value that no write of a checked client could have stored.
pub const GARBLED: u64 = u64::MAX;
/// How long a checked client waits after an operation that failed.
const AFTER_FAILURE: std::time::Duration = std::time::Duration::from_millis(20);

/// What an operation came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Ended {
    Ok = 0,
    /// No reply, or a failure: a write may have been applied (none is
    /// taken as certainly not applied, which no failure proves alone); a
    /// read returned nothing to check. (1 is left for "failed".)
    Unknown = 2,
}

/// One checked operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    pub client: u16,
    pub key: u16,
    pub write: bool,
    pub ended: Ended,
    /// Written, or read (ABSENT: the key was missing).
    pub value: u64,
    /// Unix ns, on the engine's clock.
    pub invoked_ns: i64,
    /// Unix ns; meaningful for Ended::Ok only.
    pub completed_ns: i64,
    /// The member (the plan's endpoint index) its connection was on when it
    /// ended (NO_MEMBER: the protocol cannot tell).
    pub member: u16,
}

/// An operation's member when the protocol cannot tell.
pub const NO_MEMBER: u16 = u16::MAX;

/// The checked clients while they run.
pub struct Checking<P: Protocol> {
    proto: Arc<P>,
    stop: CancellationToken,
    tasks: JoinSet<Vec<Operation>>,
}

impl<P: Protocol> Checking<P> {
    /// Opens a connection per checked client and starts them.
    pub async fn start(
        plan: &Plan,
        options: P::Options,
        check: CheckPlan,
        workload: Arc<Workload>,
        clock: Clock,
    ) -> Result<Self, EngineError> {
        let step = Step {
            clients: check.clients,
            connections: check.clients,
            requests: 0,
            rate: 0.0,
        };
        let proto = Arc::new(P::open(plan, options, &step).await?);
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let members: Arc<[String]> = plan.endpoints.iter().map(|e| e.authority.clone()).collect();
        for client in 0..check.clients {
            let checked = Client {
                proto: proto.clone(),
                members: members.clone(),
                number: client,
                keys: check.keys,
                workload: workload.clone(),
                clock,
                timeout: plan.timeout,
                seed: plan.seed ^ (client as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            };
            tasks.spawn(checked.run(stop.clone()));
        }
        Ok(Checking { proto, stop, tasks })
    }

    /// Stops them once their requests in flight are done; every operation,
    /// in no particular order.
    pub async fn finish(mut self) -> Vec<Operation> {
        self.stop.cancel();
        let mut operations = Vec::new();
        while let Some(joined) = self.tasks.join_next().await {
            operations.extend(joined.unwrap_or_default());
        }
        if let Some(proto) = Arc::into_inner(self.proto) {
            proto.close().await;
        }
        operations
    }
}

/// One checked client.
struct Client<P: Protocol> {
    proto: Arc<P>,
    /// The plan's endpoints' authorities, in member order.
    members: Arc<[String]>,
    number: usize,
    keys: usize,
    workload: Arc<Workload>,
    clock: Clock,
    timeout: std::time::Duration,
    seed: u64,
}

impl<P: Protocol> Client<P> {
    /// Half reads, half writes, of keys drawn at random, one at a time until
    /// `stop` (the operation in flight then finishes and is recorded).
    async fn run(self, stop: CancellationToken) -> Vec<Operation> {
        let mut operations = Vec::new();
        let mut random = self.seed | 1;
        let mut written = 0u64;
        while !stop.is_cancelled() {
            random = xorshift(random);
            let key = (random >> 8) as usize % self.keys;
            let name = checked_key(key);
            let invoked = Instant::now();
            let operation = if random & 1 == 0 {
                written += 1;
                let value = ((self.number as u64 + 1) << 40) | written;
                self.write(&name, value).await
            } else {
                self.read(&name).await
            };
            let (write, ended, value) = operation;
            let completed = Instant::now();
            operations.push(Operation {
                client: u16::try_from(self.number).unwrap_or(u16::MAX),
                key: u16::try_from(key).unwrap_or(u16::MAX),
                write,
                ended,
                value,
                invoked_ns: self.clock.unix_ns(invoked),
                completed_ns: self.clock.unix_ns(completed),
                member: self.member().await,
            });
            if ended != Ended::Ok {
                // A cluster without a leader refuses at once: without a pause
                // a checked client spins (30,000 refused operations in one
                // Consul election), taking CPU from the load and adding
                // unknown writes the check must branch on.
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = tokio::time::sleep(AFTER_FAILURE) => {}
                }
            }
        }
        operations
    }

    /// Which member this client's connection is on now.
    async fn member(&self) -> u16 {
        let Some(endpoint) = self.proto.endpoint(self.number).await else {
            return NO_MEMBER;
        };
        self.members
            .iter()
            .position(|m| *m == endpoint.authority)
            .and_then(|i| u16::try_from(i).ok())
            .unwrap_or(NO_MEMBER)
    }

    async fn write(&self, key: &[u8], value: u64) -> (bool, Ended, u64) {
        let bytes = Bytes::from(value.to_string());
        let request = Request::new(OpKind::Update, key, bytes, 0, &self.workload).creating();
        let mut sent = Instant::now();
        let call = self.proto.request(self.number, &request, &mut sent);
        let outcome = tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or(Outcome::Timeout);
        // Any failure may have come after the write was applied: unknown.
        let ended = if outcome.is_ok() {
            Ended::Ok
        } else {
            Ended::Unknown
        };
        (true, ended, value)
    }

    async fn read(&self, key: &[u8]) -> (bool, Ended, u64) {
        let call = self.proto.read_value(self.number, key);
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(None)) => (false, Ended::Ok, ABSENT),
            Ok(Ok(Some(bytes))) => (false, Ended::Ok, parse(&bytes)),
            // A read that failed returned nothing to check.
            Ok(Err(_)) | Err(_) => (false, Ended::Unknown, ABSENT),
        }
    }
}

/// The name of checked key `key`: "c" and its number, apart from the
/// load's keys ("k" and a number).
pub fn checked_key(key: usize) -> Vec<u8> {
    format!("c{key}").into_bytes()
}

/// A value a checked client wrote (decimal), or GARBLED.
fn parse(bytes: &[u8]) -> u64 {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.parse().ok())
        .filter(|&value| value != ABSENT)
        .unwrap_or(GARBLED)
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_read_back_or_garbled() {
        assert_eq!(parse(b"1099511627777"), (1 << 40) | 1);
        assert_eq!(parse(b"0"), GARBLED); // no write stores ABSENT
        assert_eq!(parse(b"k42"), GARBLED);
        assert_eq!(parse(b""), GARBLED);
    }

    #[test]
    fn checked_keys_are_apart_from_the_loads() {
        assert_eq!(checked_key(7), b"c7");
        assert!(crate::workload::watch::key_number(&checked_key(7)).is_none());
    }

    #[test]
    fn the_random_draws_cover_keys_and_both_kinds() {
        let mut random = 12345u64 | 1;
        let mut seen = [[false; 2]; 8];
        for _ in 0..1000 {
            random = xorshift(random);
            seen[(random >> 8) as usize % 8][(random & 1) as usize] = true;
        }
        assert!(seen.iter().flatten().all(|&s| s));
    }
}
