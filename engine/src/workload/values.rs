//! What writes store and what reads accept.
//!
//! `fixed` (the write and read workloads): every value is `value_size` bytes
//! of "v", as before, so their figures stay comparable with earlier runs.
//!
//! `tagged` (the mixed workload): a value names its key and the write that
//! made it, so a read can tell a right value from another key's, a torn one,
//! or one no write produced. Its first 32 bytes are two 16-digit lower-case
//! hex numbers: the key's number and the writer (0: the insert that created
//! the key; w + 1: the update or read-modify-write with write id w, a
//! request's number plus the plan's `write_id_base`). The rest repeats 16 hex
//! digits derived from both, so a value pieced together from two writes does
//! not match either. `value_size` must be at least 32.

use std::collections::TryReserveError;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::workload::keys::SplitMix64;

/// The tag's length: key and writer, 16 hex digits each.
pub const TAG_LEN: usize = 32;

/// No write made this slot's request (a read, or not sent yet).
const NONE: u64 = u64::MAX;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The tagged value of key `key` written by `writer`, `size` bytes long.
pub fn tagged(key: u64, writer: u64, size: usize) -> Vec<u8> {
    let mut value = Vec::with_capacity(size.max(TAG_LEN));
    push_hex(&mut value, key);
    push_hex(&mut value, writer);
    let pattern = filler(key, writer);
    while value.len() < size {
        let take = (size - value.len()).min(pattern.len());
        value.extend_from_slice(&pattern[..take]);
    }
    value.truncate(size.max(TAG_LEN));
    value
}

/// The key and writer a tagged value names; None if it is not one.
pub fn parse(value: &[u8]) -> Option<(u64, u64)> {
    if value.len() < TAG_LEN {
        return None;
    }
    Some((hex(&value[..16])?, hex(&value[16..32])?))
}

fn push_hex(out: &mut Vec<u8>, n: u64) {
    for shift in (0..16).rev() {
        out.push(HEX[((n >> (shift * 4)) & 0xf) as usize]);
    }
}

fn hex(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |n, d| {
        let digit = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => return None,
        };
        Some(n << 4 | u64::from(digit))
    })
}

fn filler(key: u64, writer: u64) -> [u8; 16] {
    let mut rng = SplitMix64::new(key ^ writer.rotate_left(32));
    let mut bits = rng.next();
    let mut out = [0u8; 16];
    for byte in &mut out {
        *byte = HEX[(bits & 0xf) as usize];
        bits >>= 4;
    }
    out
}

/// Which key each write of a run wrote (by request number), so a read can
/// check that the writer its value names wrote that key.
pub struct Written {
    base: u64,
    keys: Vec<AtomicU64>,
}

impl Written {
    /// Room for `requests` writes (8 bytes each), numbered from `base`.
    pub fn new(base: u64, requests: u64) -> Result<Written, TryReserveError> {
        let mut keys = Vec::new();
        keys.try_reserve_exact(usize::try_from(requests).unwrap_or(usize::MAX))?;
        keys.extend((0..requests).map(|_| AtomicU64::new(NONE)));
        Ok(Written { base, keys })
    }

    /// Request `r` writes key `key`: its writer, for the value's tag. Noted
    /// before the write is sent, so a read that sees it can check it.
    pub fn note(&self, r: u64, key: u64) -> u64 {
        self.keys[r as usize].store(key, Ordering::Release);
        self.base + r + 1
    }

    /// Whether a value of key `key` that names `writer` is one a write made.
    pub fn made(&self, key: u64, writer: u64) -> bool {
        let Some(id) = writer.checked_sub(1) else {
            return true; // the insert that created the key
        };
        match id.checked_sub(self.base) {
            // An earlier run's write (the warm-up's): its form was checked.
            None => true,
            Some(r) => self
                .keys
                .get(usize::try_from(r).unwrap_or(usize::MAX))
                .is_some_and(|k| k.load(Ordering::Acquire) == key),
        }
    }
}

/// Whether `value`, read from key `key`, is one some write of it produced:
/// its tag names the key, its writer wrote the key, and its filler is the one
/// those two make (not torn).
pub fn accepts(value: &[u8], key: u64, size: usize, written: Option<&Written>) -> bool {
    let Some((named, writer)) = parse(value) else {
        return false;
    };
    named == key
        && value.len() == size.max(TAG_LEN)
        && written.is_none_or(|w| w.made(key, writer))
        && value == tagged(key, writer, size).as_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_names_its_key_and_writer() {
        let value = tagged(0x2a, 7, 64);
        assert_eq!(value.len(), 64);
        assert_eq!(&value[..32], b"000000000000002a0000000000000007");
        assert_eq!(parse(&value), Some((42, 7)));
        assert_eq!(tagged(1, 0, 32).len(), 32);
        assert!(value.iter().all(u8::is_ascii_hexdigit));
    }

    #[test]
    fn reads_accept_only_what_a_write_made() {
        let written = Written::new(100, 10).unwrap();
        let writer = written.note(3, 42);
        assert_eq!(writer, 104);
        let good = tagged(42, writer, 64);
        assert!(accepts(&good, 42, 64, Some(&written)));
        // The insert's value, and a value of an earlier run's write.
        assert!(accepts(&tagged(42, 0, 64), 42, 64, Some(&written)));
        assert!(accepts(&tagged(42, 50, 64), 42, 64, Some(&written)));
        // Another key's value.
        assert!(!accepts(&tagged(43, 0, 64), 42, 64, Some(&written)));
        // A writer that wrote another key, or none at all.
        let other = written.note(4, 7);
        assert!(!accepts(&tagged(42, other, 64), 42, 64, Some(&written)));
        assert!(!accepts(&tagged(42, 106, 64), 42, 64, Some(&written)));
        assert!(!accepts(&tagged(42, 1000, 64), 42, 64, Some(&written)));
        // Torn: the tag of one write, the rest of another.
        let mut torn = good.clone();
        torn[32..].copy_from_slice(&tagged(42, 0, 64)[32..]);
        assert!(!accepts(&torn, 42, 64, Some(&written)));
        // Cut short, or not a tag at all.
        assert!(!accepts(&good[..63], 42, 64, Some(&written)));
        assert!(!accepts(&[b'v'; 64], 42, 64, Some(&written)));
        assert!(!accepts(b"", 42, 64, None));
    }
}
