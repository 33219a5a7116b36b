//! Which key each request uses. Key number `n` is `b"k"` followed by `n`
//! zero-padded to `key_size - 1` digits (the Python side builds the same
//! bytes to seed and verify), so keys are distinct, fixed-size and share a
//! prefix a verifier can count.

use crate::plan::{InsertOrder, Plan};
use std::collections::TryReserveError;

pub const PREFIX: u8 = b'k';

/// How many distinct keys fit in `key_size` bytes; None when more than a u64 counts.
pub fn capacity(key_size: usize) -> Option<u64> {
    let width = u32::try_from(key_size.saturating_sub(1)).ok()?;
    10u64.checked_pow(width)
}

/// Writes key number `n` into `out` (replacing its contents); false when `n`
/// needs more digits than `key_size` leaves.
pub fn write_key(n: u64, key_size: usize, out: &mut Vec<u8>) -> bool {
    out.clear();
    out.push(PREFIX);
    out.resize(key_size.max(1), b'0');
    if key_size <= 1 {
        return true; // the one key there is, whatever n says (as in Python)
    }
    let mut rest = n;
    let mut at = out.len();
    while rest > 0 {
        if at == 1 {
            return false;
        }
        at -= 1;
        out[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    true
}

/// The order new keys are created in.
enum Order {
    /// Insert n creates key n (after the existing ones).
    Sequential,
    /// Insert n creates key perm[n].
    Permuted(Vec<u32>),
}

/// Key numbers for one run: a key's index (0 .. existing: the keys there
/// before the run; existing + n: insert n's) to its number and bytes.
pub struct Keys {
    key_size: usize,
    first: u64,
    existing: u64,
    inserts: Order,
}

impl Keys {
    /// Builds the run's insert order (a permutation costs 4 bytes per key,
    /// and only a run that `inserts` needs one); an error when this machine
    /// cannot hold it, never an abort.
    pub fn new(plan: &Plan, inserts: bool) -> Result<Self, TryReserveError> {
        let keys = &plan.keys;
        let inserts = match keys.inserts {
            InsertOrder::Permuted if inserts => {
                Order::Permuted(permutation(keys.insert_space, plan.seed)?)
            }
            _ => Order::Sequential,
        };
        Ok(Keys {
            key_size: plan.key_size,
            first: keys.first,
            existing: keys.existing,
            inserts,
        })
    }

    /// The number of the key at `index`.
    pub fn number(&self, index: u64) -> u64 {
        if index < self.existing {
            return self.first + index;
        }
        let n = index - self.existing;
        let offset = match &self.inserts {
            Order::Sequential => n,
            Order::Permuted(perm) => u64::from(perm[n as usize]),
        };
        self.first + self.existing + offset
    }

    /// The number of the key insert `n` creates.
    pub fn inserted(&self, n: u64) -> u64 {
        self.number(self.existing + n)
    }

    /// The key numbered `number`, written into `out`.
    pub fn key_into(&self, number: u64, out: &mut Vec<u8>) {
        let fits = write_key(number, self.key_size, out);
        // Plan validation checked every key number fits in key_size.
        debug_assert!(fits, "key {number} does not fit in {} bytes", self.key_size);
    }
}

/// A permutation of 0..len, the same for the same seed on every platform and
/// release: Fisher-Yates driven by SplitMix64, both fully specified here.
/// `len` must be at most 2^32 (plan validation ensures it).
pub fn permutation(len: u64, seed: u64) -> Result<Vec<u32>, TryReserveError> {
    assert!(len <= 1 << 32, "permutation of {len} does not fit u32");
    let mut perm: Vec<u32> = Vec::new();
    perm.try_reserve_exact(len as usize)?;
    perm.extend((0..len).map(|i| i as u32));
    let mut rng = SplitMix64(seed);
    for i in (1..perm.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        perm.swap(i, j);
    }
    Ok(perm)
}

/// SplitMix64 (Steele, Lea and Flood, 2014): tiny, fast, and good enough to
/// shuffle key order; chosen over a crate so the order can never change under us.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// A generator for request `r` of a run seeded `seed`: each request
    /// draws from its own stream, so a request's draws do not depend on
    /// which requests finished before it.
    pub fn for_request(seed: u64, r: u64) -> SplitMix64 {
        let mut base = SplitMix64(seed ^ r.wrapping_mul(0xD1B5_4A32_D192_ED03));
        SplitMix64(base.next())
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..bound by multiply-high; the bias (bound / 2^64) is negligible here.
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(bound)) >> 64) as u64
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64, size: usize) -> Option<String> {
        let mut out = Vec::new();
        write_key(n, size, &mut out).then(|| String::from_utf8(out).unwrap())
    }

    #[test]
    fn keys_are_zero_padded() {
        assert_eq!(key(0, 8).as_deref(), Some("k0000000"));
        assert_eq!(key(42, 8).as_deref(), Some("k0000042"));
        assert_eq!(key(9_999_999, 8).as_deref(), Some("k9999999"));
        assert_eq!(key(5, 2).as_deref(), Some("k5"));
    }

    #[test]
    fn key_size_one_is_just_k() {
        assert_eq!(key(0, 1).as_deref(), Some("k"));
        assert_eq!(capacity(1), Some(1));
    }

    #[test]
    fn out_of_space() {
        assert_eq!(key(10_000_000, 8), None);
        assert_eq!(key(10, 2), None);
        assert_eq!(capacity(8), Some(10_000_000));
        assert_eq!(capacity(20), Some(10_000_000_000_000_000_000));
        assert_eq!(capacity(21), None);
    }

    #[test]
    fn permutation_is_a_permutation() {
        for len in [0u64, 1, 2, 3, 10, 1000, 65_537] {
            let mut perm = permutation(len, 99).unwrap();
            assert_eq!(perm.len() as u64, len);
            perm.sort_unstable();
            assert!(perm.iter().enumerate().all(|(i, &p)| p as usize == i));
        }
    }

    #[test]
    fn permutation_is_deterministic_per_seed() {
        let a = permutation(10_000, 1).unwrap();
        assert_eq!(a, permutation(10_000, 1).unwrap());
        assert_ne!(a, permutation(10_000, 2).unwrap());
        // Actually shuffled: few keys stay where they were.
        let fixed = a
            .iter()
            .enumerate()
            .filter(|(i, p)| *i == **p as usize)
            .count();
        assert!(fixed < 20, "{fixed} fixed points");
    }

    #[test]
    fn indexes_map_to_key_numbers() {
        let mut plan = crate::plan::tests::good_plan();
        plan.keys.inserts = InsertOrder::Sequential;
        let keys = Keys::new(&plan, true).unwrap();
        let mut out = Vec::new();
        keys.key_into(keys.number(123), &mut out);
        assert_eq!(out, b"k0000123");

        plan.keys.inserts = InsertOrder::Permuted;
        let keys = Keys::new(&plan, true).unwrap();
        let perm = permutation(plan.keys.insert_space, plan.seed).unwrap();
        assert_eq!(keys.number(5), u64::from(perm[5]));

        // Existing keys come first, in order; inserts are numbered after them.
        plan.keys.existing = 100;
        plan.keys.first = 1000;
        let keys = Keys::new(&plan, true).unwrap();
        assert_eq!(keys.number(7), 1007);
        assert_eq!(keys.number(105), 1100 + u64::from(perm[5]));
    }
}
