//! What watchers saw of a write load (`type: watch`): each put's send time,
//! and for every watcher which keys' events reached it, when, and what was
//! wrong with them (twice, out of order, a key no write of the run made).
//!
//! An event's latency is its arrival minus its put's send time, both on the
//! engine's one monotonic clock. Each (event, watcher) pair is kept
//! compactly (12 bytes: the key's offset, the latency in microseconds, the
//! arrival in milliseconds since the log began), and which keys a watcher
//! saw is a bitset, so 100 watchers of 100,000 puts take 120 MB of samples
//! and 1.25 MB of bits.

use std::collections::TryReserveError;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::workload::keys;

/// No put of this key has been sent yet.
const UNSENT: u64 = u64::MAX;

/// When each put was sent, by its key's offset from the run's first key.
pub struct SentTimes {
    origin: Instant,
    first_key: u64,
    ns: Vec<AtomicU64>,
}

impl SentTimes {
    /// Room for `count` keys from `first_key` on (8 bytes each).
    pub fn new(origin: Instant, first_key: u64, count: u64) -> Result<Self, TryReserveError> {
        let mut ns = Vec::new();
        ns.try_reserve_exact(usize::try_from(count).unwrap_or(usize::MAX))?;
        ns.extend((0..count).map(|_| AtomicU64::new(UNSENT)));
        Ok(SentTimes {
            origin,
            first_key,
            ns,
        })
    }

    /// The key's offset, if it is one of this run's.
    pub fn offset(&self, key: u64) -> Option<usize> {
        let offset = usize::try_from(key.checked_sub(self.first_key)?).ok()?;
        (offset < self.ns.len()).then_some(offset)
    }

    /// Put of `key` sent at `at`: noted before it is sent, so that a watcher
    /// that sees its event finds it.
    pub fn note(&self, key: u64, at: Instant) {
        if let Some(offset) = self.offset(key) {
            let ns = u64::try_from(at.saturating_duration_since(self.origin).as_nanos());
            self.ns[offset].store(ns.unwrap_or(UNSENT - 1), Ordering::Release);
        }
    }

    /// When the put at `offset` was sent, in ns since the origin.
    fn sent_ns(&self, offset: usize) -> Option<u64> {
        let ns = self.ns[offset].load(Ordering::Acquire);
        (ns != UNSENT).then_some(ns)
    }

    /// Each put's send, in milliseconds since the origin (u32::MAX: never
    /// sent), by key offset: which fault window a put fell in.
    pub fn sent_ms(&self) -> Vec<u32> {
        (0..self.ns.len())
            .map(|offset| {
                self.sent_ns(offset).map_or(u32::MAX, |ns| {
                    u32::try_from(ns / 1_000_000).unwrap_or(u32::MAX - 1)
                })
            })
            .collect()
    }

    /// How many keys' send times it holds.
    pub fn count(&self) -> usize {
        self.ns.len()
    }

    pub fn origin(&self) -> Instant {
        self.origin
    }
}

/// One event a watcher received: whose put, how late, when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// The key's offset from the run's first key.
    pub key: u32,
    /// Arrival minus the put's send time, in microseconds.
    pub latency_us: u32,
    /// Arrival, in milliseconds since the log's origin.
    pub arrival_ms: u32,
}

/// What one watcher saw.
#[derive(Debug, Default)]
pub struct WatcherLog {
    /// Bit k: the event of the key at offset k arrived.
    pub seen: Vec<u64>,
    /// In arrival order.
    pub samples: Vec<Sample>,
    /// Events of a key already seen.
    pub duplicates: u64,
    /// Each of those duplicates' arrival, in milliseconds since the origin
    /// (so a fault window can count its own).
    pub duplicate_ms: Vec<u32>,
    /// Events whose revision was below the last one this watcher saw.
    pub out_of_order: u64,
    /// Events of keys no put of this run wrote.
    pub foreign: u64,
    /// Keys that arrived in a reply that brought an earlier one too (a
    /// Consul blocking query answers every change since the last with one
    /// reply): received, but not as an event of their own.
    pub coalesced: u64,
    /// Replies that began with an event of the revision the one before
    /// ended with, of another key: a revision split across replies (etcd
    /// sends each revision's events whole).
    pub split: u64,
    last_revision: i64,
    /// Its events carried no revision (ZooKeeper before 3.9): order is
    /// judged when the run ends, by the revisions the writes' replies gave.
    unrevised: bool,
}

impl WatcherLog {
    fn new(keys: usize) -> Self {
        // Room for one event per key up front: growing by doubling copies a
        // watcher's events again and again, and leaves the freed copies with
        // the allocator (45 MB more resident after 100 watchers of 100,000
        // puts). Untouched, the room costs address space, not memory.
        let mut samples = Vec::new();
        let _ = samples.try_reserve_exact(keys);
        WatcherLog {
            seen: vec![0; keys.div_ceil(64)],
            samples,
            ..WatcherLog::default()
        }
    }

    /// How many distinct keys' events arrived.
    pub fn received(&self) -> u64 {
        self.seen.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// Counts the events whose write's revision is not above the last one
    /// before them in arrival order (writes with no known revision, never
    /// acknowledged, are skipped).
    fn judge_order(&mut self, written: &[AtomicI64]) {
        let mut last = 0;
        for sample in &self.samples {
            let revision = written[sample.key as usize].load(Ordering::Relaxed);
            if revision == UNWRITTEN {
                continue;
            }
            if revision <= last {
                self.out_of_order += 1;
            } else {
                last = revision;
            }
        }
    }
}

/// No write's reply has given this key's revision.
const UNWRITTEN: i64 = 0;

/// How an event's order is judged.
#[derive(Clone, Copy)]
enum Order {
    /// By its revision, against the last one the watcher saw.
    At(i64),
    /// It came with the event just judged and shares its revision.
    WithLast,
    /// When the run ends, by the revision its write's reply gave.
    AtEnd,
}

/// What the watchers saw, for Python: each watcher's log, which puts were
/// acknowledged and when each was sent, and the wall-clock time arrivals
/// count from.
#[derive(Debug)]
pub struct Watched {
    pub logs: Vec<WatcherLog>,
    /// Bit k: the put of the key at offset k was acknowledged.
    pub acked: Vec<u64>,
    /// The put of the key at offset k was sent this many ms after the origin.
    pub sent_ms: Vec<u32>,
    /// The log's origin on the wall clock (unix ns).
    pub origin_unix_ns: i64,
}

/// Every watcher's log, each behind its own lock (one watcher's events
/// come from one task, so the locks are not contended).
pub struct WatchLog {
    sent: SentTimes,
    /// Bit k: the put of the key at offset k was acknowledged.
    acked: Vec<AtomicU64>,
    /// The revision each put's reply gave (UNWRITTEN until then), for
    /// protocols whose events carry none.
    written: Vec<AtomicI64>,
    watchers: Vec<Mutex<WatcherLog>>,
}

impl WatchLog {
    pub fn new(sent: SentTimes, watchers: usize) -> Self {
        let keys = sent.count();
        WatchLog {
            watchers: (0..watchers)
                .map(|_| Mutex::new(WatcherLog::new(keys)))
                .collect(),
            acked: (0..keys.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            written: (0..keys).map(|_| AtomicI64::new(UNWRITTEN)).collect(),
            sent,
        }
    }

    /// The put of `key` was acknowledged: its event is expected.
    pub fn acknowledged(&self, key: u64) {
        if let Some(offset) = self.sent.offset(key) {
            self.acked[offset / 64].fetch_or(1 << (offset % 64), Ordering::Relaxed);
        }
    }

    pub fn sent(&self) -> &SentTimes {
        &self.sent
    }

    /// The put of `key` was written at `revision` (ZooKeeper's zxid of its
    /// create): how the order of events without a revision is judged.
    pub fn written(&self, key: u64, revision: i64) {
        if let Some(offset) = self.sent.offset(key) {
            self.written[offset].store(revision, Ordering::Relaxed);
        }
    }

    /// Watcher `watcher` received the event of `key` at `arrived`, at
    /// `revision` (etcd's mod_revision, or any number that grows with the
    /// writes; None: the event carries none, see `written`).
    pub fn event(&self, watcher: usize, key: u64, revision: Option<i64>, arrived: Instant) {
        let mut log = self.lock(watcher);
        self.note(
            &mut log,
            key,
            revision.map_or(Order::AtEnd, Order::At),
            arrived,
        );
    }

    /// Watcher `watcher` received one listing of the watched prefix (a
    /// Consul blocking query's reply) at `arrived`, at `revision` (its
    /// index), with the run's `keys` in it (keys of other runs are the
    /// caller's to count, see `foreign`). Keys it found before are not
    /// events again; of the new ones, each after the first is counted as
    /// coalesced, and only the first is judged for order (they share it).
    pub fn listed(
        &self,
        watcher: usize,
        keys: impl IntoIterator<Item = u64>,
        revision: i64,
        arrived: Instant,
    ) {
        let mut log = self.lock(watcher);
        let mut new = 0u64;
        for key in keys {
            let Some(offset) = self.sent.offset(key) else {
                continue;
            };
            if log.seen[offset / 64] & (1 << (offset % 64)) == 0 {
                let order = if new == 0 {
                    Order::At(revision)
                } else {
                    Order::WithLast
                };
                self.note(&mut log, key, order, arrived);
                new += 1;
            }
        }
        log.coalesced += new.saturating_sub(1);
    }

    /// Watcher `watcher` received a reply that split a revision.
    pub fn split(&self, watcher: usize) {
        self.lock(watcher).split += 1;
    }

    /// Watcher `watcher` received `count` events of keys no put of this run
    /// wrote.
    pub fn foreign(&self, watcher: usize, count: u64) {
        self.lock(watcher).foreign += count;
    }

    fn lock(&self, watcher: usize) -> std::sync::MutexGuard<'_, WatcherLog> {
        self.watchers[watcher]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn note(&self, log: &mut WatcherLog, key: u64, order: Order, arrived: Instant) {
        let Some(offset) = self.sent.offset(key) else {
            log.foreign += 1;
            return;
        };
        let (word, bit) = (offset / 64, 1u64 << (offset % 64));
        if log.seen[word] & bit != 0 {
            log.duplicates += 1;
            let arrived_ms = arrived
                .saturating_duration_since(self.sent.origin)
                .as_millis();
            log.duplicate_ms
                .push(u32::try_from(arrived_ms).unwrap_or(u32::MAX));
            return;
        }
        log.seen[word] |= bit;
        match order {
            Order::AtEnd => log.unrevised = true,
            Order::WithLast => {}
            // Events of one revision are one transaction's writes (etcd's
            // revision, ZooKeeper's zxid): equal is in order.
            Order::At(revision) if revision < log.last_revision => log.out_of_order += 1,
            Order::At(revision) => log.last_revision = revision,
        }
        let arrived_ns = arrived
            .saturating_duration_since(self.sent.origin)
            .as_nanos();
        let arrived_ns = u64::try_from(arrived_ns).unwrap_or(u64::MAX);
        // Its put is noted before it is sent, so its time is there.
        let sent_ns = self.sent.sent_ns(offset).unwrap_or(arrived_ns);
        log.samples.push(Sample {
            key: u32::try_from(offset).unwrap_or(u32::MAX),
            latency_us: micros(arrived_ns.saturating_sub(sent_ns)),
            arrival_ms: u32::try_from(arrived_ns / 1_000_000).unwrap_or(u32::MAX),
        });
    }

    /// How many puts were acknowledged so far.
    pub fn acknowledged_count(&self) -> u64 {
        self.acked
            .iter()
            .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
            .sum()
    }

    /// Whether every watcher has seen `expected` keys (a drain can stop).
    pub fn complete(&self, expected: u64) -> bool {
        self.watchers
            .iter()
            .all(|w| w.lock().unwrap_or_else(PoisonError::into_inner).received() >= expected)
    }

    /// The logs, in watcher order, the acknowledged puts' bits, and the
    /// puts' send times (`SentTimes::sent_ms`).
    pub fn into_parts(self) -> (Vec<WatcherLog>, Vec<u64>, Vec<u32>) {
        let sent_ms = self.sent.sent_ms();
        let written = self.written;
        let logs = self
            .watchers
            .into_iter()
            .map(|w| {
                let mut log = w.into_inner().unwrap_or_else(PoisonError::into_inner);
                if log.unrevised {
                    log.judge_order(&written);
                }
                log
            })
            .collect();
        let acked = self.acked.into_iter().map(AtomicU64::into_inner).collect();
        (logs, acked, sent_ms)
    }
}

/// What `next` gives, or None once `stop` is cancelled (first, if both are
/// ready): a watcher's wait for its next event.
pub async fn unless_stopped<T>(
    stop: &CancellationToken,
    next: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        () = stop.cancelled() => None,
        value = next => Some(value),
    }
}

fn micros(ns: u64) -> u32 {
    u32::try_from(ns / 1_000).unwrap_or(u32::MAX)
}

/// The key number a write load's key names ("k" and its number,
/// zero-padded to the key size: keys::write_key); None for any other key.
pub fn key_number(key: &[u8]) -> Option<u64> {
    let digits = key.strip_prefix(&[keys::PREFIX])?;
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn log(watchers: usize) -> (WatchLog, Instant) {
        let origin = Instant::now();
        (
            WatchLog::new(SentTimes::new(origin, 100, 10).unwrap(), watchers),
            origin,
        )
    }

    #[test]
    fn an_event_is_timed_from_its_puts_send() {
        let (log, origin) = log(2);
        log.sent().note(103, origin + Duration::from_millis(5));
        log.acknowledged(103);
        log.event(1, 103, Some(7), origin + Duration::from_millis(7));
        let (logs, acked, sent) = log.into_parts();
        assert_eq!(acked, [1 << 3]);
        let mut unsent = [u32::MAX; 10];
        unsent[3] = 5;
        assert_eq!(sent, unsent);
        assert_eq!(logs[0].received(), 0);
        assert_eq!(logs[1].received(), 1);
        assert_eq!(
            logs[1].samples,
            [Sample {
                key: 3,
                latency_us: 2000,
                arrival_ms: 7
            }]
        );
    }

    #[test]
    fn twice_out_of_order_and_foreign_are_counted_apart() {
        let (log, origin) = log(1);
        for key in 100..110 {
            log.sent().note(key, origin);
        }
        log.event(0, 100, Some(5), origin);
        log.event(0, 101, Some(6), origin);
        log.event(0, 101, Some(6), origin + Duration::from_millis(9)); // twice
        log.event(0, 102, Some(4), origin); // a revision behind
        log.event(0, 103, Some(6), origin); // one write's, with 101
        log.event(0, 7, Some(9), origin); // not a key of this run
        log.event(0, 110, Some(9), origin); // past its keys
        assert!(!log.complete(10));
        let (logs, _, _) = log.into_parts();
        let one = &logs[0];
        assert_eq!(one.received(), 4);
        assert_eq!((one.duplicates, one.out_of_order, one.foreign), (1, 1, 2));
        assert_eq!(one.samples.len(), 4);
        assert_eq!(one.duplicate_ms, [9]);
    }

    #[test]
    fn a_drain_ends_once_every_watcher_saw_every_key() {
        let (log, origin) = log(2);
        for watcher in 0..2 {
            for key in 100..110 {
                assert!(!log.complete(10));
                log.event(watcher, key, Some(key as i64), origin);
            }
        }
        assert!(log.complete(10));
    }

    #[test]
    fn events_without_revisions_are_ordered_by_their_writes() {
        let (log, origin) = log(1);
        for (key, zxid) in [(100, 10), (101, 11), (102, 12)] {
            log.written(key, zxid);
        }
        // 102 arrives before 101, and 103's write was never answered.
        for key in [100, 102, 103, 101] {
            log.event(0, key, None, origin);
        }
        let (logs, _, _) = log.into_parts();
        assert_eq!((logs[0].received(), logs[0].out_of_order), (4, 1));
    }

    #[test]
    fn a_listing_counts_only_new_keys_and_coalesces_all_but_one() {
        let (log, origin) = log(1);
        log.listed(0, [100], 5, origin);
        log.listed(0, [100, 101, 102, 103], 8, origin); // three new in one reply
        log.listed(0, [100, 101, 102, 103], 9, origin); // nothing new
        log.listed(0, [100, 101, 102, 103, 104], 7, origin); // its index went back
        log.foreign(0, 2);
        let (logs, _, _) = log.into_parts();
        let one = &logs[0];
        assert_eq!(one.received(), 5);
        assert_eq!((one.coalesced, one.duplicates, one.out_of_order), (2, 0, 1));
        assert_eq!((one.samples.len(), one.foreign), (5, 2));
    }

    #[test]
    fn key_numbers_are_read_from_the_write_loads_keys() {
        assert_eq!(key_number(b"k0000000042"), Some(42));
        assert_eq!(key_number(b"k7"), Some(7));
        let mut long = Vec::new();
        assert!(keys::write_key(1234, 256, &mut long));
        assert_eq!(key_number(&long), Some(1234));
        assert_eq!(key_number(b"k"), None);
        assert_eq!(key_number(b"x42"), None);
        assert_eq!(key_number(b"k4a"), None);
        assert_eq!(key_number(b"k99999999999999999999"), None);
    }
}
