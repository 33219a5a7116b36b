//! One record per request sent, in column vectors sized once up front
//! (8 + 8 + 8 + 1 + 2 + 1 + 1 = 29 bytes a request) and later handed to numpy as they
//! are, so a multi-million request run never grows, copies or pads them.

use std::collections::TryReserveError;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const OK: &str = "ok";
pub const OTHER_ERROR: &str = "other-error";
/// Codes are stored as uint8: at most 255 names.
pub const MAX_CODES: usize = 255;

/// Outcome names, numbered in order of first appearance; "ok" is always 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeTable {
    names: Vec<String>,
}

impl Default for CodeTable {
    fn default() -> Self {
        CodeTable {
            names: vec![OK.to_owned()],
        }
    }
}

impl CodeTable {
    /// The code for `name`, adding it if new. The last slot is kept for
    /// "other-error", which every kind past the limit becomes.
    pub fn code(&mut self, name: &str) -> u8 {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return i as u8;
        }
        if self.names.len() < MAX_CODES - 1 {
            self.names.push(name.to_owned());
            return (self.names.len() - 1) as u8;
        }
        if let Some(i) = self.names.iter().position(|n| n == OTHER_ERROR) {
            return i as u8;
        }
        self.names.push(OTHER_ERROR.to_owned());
        (self.names.len() - 1) as u8
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// The columns, filled in completion order.
#[derive(Debug, Default)]
pub struct Records {
    pub due_ns: Vec<i64>,
    pub latency_ns: Vec<i64>,
    pub service_ns: Vec<i64>,
    pub code: Vec<u8>,
    pub step: Vec<u16>,
    /// The operation (workload::OpKind as a number).
    pub op: Vec<u8>,
    /// 1: an open-loop request that found every client busy at its due time
    /// and waited for one (the open loop's queue); 0: it was sent as soon
    /// as it was due, so latency_ns - service_ns is its send lag.
    pub queued: Vec<u8>,
    pub codes: CodeTable,
}

/// What one request produced.
#[derive(Debug, Clone, Copy)]
pub struct Record {
    pub due_ns: i64,
    pub latency_ns: i64,
    pub service_ns: i64,
    pub code: u8,
    pub step: u16,
    pub op: u8,
    pub queued: u8,
}

impl Records {
    /// Reserves exactly `n` records; fails instead of aborting when memory is short.
    pub fn with_capacity(n: u64) -> Result<Self, TryReserveError> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let mut records = Records::default();
        records.due_ns.try_reserve_exact(n)?;
        records.latency_ns.try_reserve_exact(n)?;
        records.service_ns.try_reserve_exact(n)?;
        records.code.try_reserve_exact(n)?;
        records.step.try_reserve_exact(n)?;
        records.op.try_reserve_exact(n)?;
        records.queued.try_reserve_exact(n)?;
        Ok(records)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.due_ns.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.due_ns.is_empty()
    }

    /// Adds one record. Each request is recorded once and the vectors were
    /// sized for every request, so this never reallocates.
    pub fn push(&mut self, record: Record) {
        debug_assert!(
            self.due_ns.len() < self.due_ns.capacity(),
            "records overflow"
        );
        self.due_ns.push(record.due_ns);
        self.latency_ns.push(record.latency_ns);
        self.service_ns.push(record.service_ns);
        self.code.push(record.code);
        self.step.push(record.step);
        self.op.push(record.op);
        self.queued.push(record.queued);
    }
}

/// Converts monotonic instants to unix nanoseconds from one anchor pair taken
/// at start, so every record shares the same offset (the wall clock may be
/// stepped during a run; the monotonic clock is not).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    wall_ns: i64,
    mono: Instant,
}

impl Clock {
    pub fn new() -> Self {
        let mono = Instant::now();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Clock {
            wall_ns: nanos(wall),
            mono,
        }
    }

    /// The instant the wall clock reads `unix_ns` (now or later: an instant
    /// already past is now).
    pub fn instant_at(&self, unix_ns: i64) -> Instant {
        let ahead = unix_ns.saturating_sub(self.unix_ns(Instant::now()));
        Instant::now() + Duration::from_nanos(u64::try_from(ahead).unwrap_or(0))
    }

    pub fn unix_ns(&self, at: Instant) -> i64 {
        match at.checked_duration_since(self.mono) {
            Some(after) => self.wall_ns + nanos(after),
            None => self.wall_ns - nanos(self.mono - at),
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// Nanoseconds from `earlier` to `later` (0 if `later` is not later).
pub fn between(earlier: Instant, later: Instant) -> i64 {
    nanos(later.saturating_duration_since(earlier))
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_on_the_wall_clock_is_found_ahead_or_now() {
        let clock = Clock::new();
        let now = clock.unix_ns(Instant::now());
        let ahead = clock.instant_at(now + 50_000_000);
        let wait = ahead.saturating_duration_since(Instant::now());
        assert!(wait > Duration::from_millis(40) && wait <= Duration::from_millis(50));
        let past = clock.instant_at(now - 1_000_000_000);
        assert!(past.saturating_duration_since(Instant::now()) == Duration::ZERO);
    }

    #[test]
    fn ok_is_code_zero_and_names_are_stable() {
        let mut table = CodeTable::default();
        assert_eq!(table.code("ok"), 0);
        assert_eq!(table.code("timeout"), 1);
        assert_eq!(table.code("UNAVAILABLE"), 2);
        assert_eq!(table.code("timeout"), 1);
        assert_eq!(table.names(), ["ok", "timeout", "UNAVAILABLE"]);
    }

    #[test]
    fn code_table_overflows_to_other_error() {
        let mut table = CodeTable::default();
        for i in 1..254 {
            assert_eq!(table.code(&format!("kind-{i}")), i as u8);
        }
        assert_eq!(table.names().len(), 254);
        let other = table.code("kind-254");
        assert_eq!(other, 254);
        assert_eq!(table.names()[254], OTHER_ERROR);
        assert_eq!(table.code("kind-999"), 254);
        assert_eq!(table.code("kind-7"), 7);
        assert_eq!(table.names().len(), MAX_CODES);
    }

    #[test]
    fn records_are_preallocated_exactly_and_truncated_by_length() {
        let mut records = Records::with_capacity(3).unwrap();
        assert!(records.is_empty());
        assert_eq!(records.due_ns.capacity(), 3);
        assert_eq!(records.step.capacity(), 3);
        records.push(Record {
            due_ns: 1,
            latency_ns: 2,
            service_ns: 3,
            code: 0,
            step: 1,
            op: 2,
            queued: 1,
        });
        // Only what was recorded is there: no zero rows for requests never sent.
        assert_eq!(records.len(), 1);
        assert_eq!(records.due_ns, [1]);
        assert_eq!(records.step, [1]);
        assert_eq!(records.queued, [1]);
        assert_eq!(records.due_ns.capacity(), 3);
    }

    #[test]
    fn clock_converts_instants_to_unix_ns() {
        let clock = Clock::new();
        let now = Instant::now();
        let later = now + Duration::from_millis(5);
        assert_eq!(clock.unix_ns(later) - clock.unix_ns(now), 5_000_000);
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        assert!((clock.unix_ns(now) - nanos(wall)).abs() < 100_000_000);
        assert_eq!(between(later, now), 0);
        assert_eq!(between(now, later), 5_000_000);
    }
}
