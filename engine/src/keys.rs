//! Which key each request uses. Key number `n` is `b"k"` followed by `n`
//! zero-padded to `key_size - 1` digits (the Python side builds the same
//! bytes to seed and verify), so keys are distinct, fixed-size and share a
//! prefix a verifier can count.

use crate::plan::Plan;
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

enum Order {
    /// Every request uses key 0 (reads, same_key writes).
    Same,
    /// Request r uses key r.
    Sequential,
    /// Request r uses key perm[r].
    Permuted(Vec<u32>),
}

/// Request number -> key bytes for one run.
pub struct Keys {
    key_size: usize,
    first: u64,
    order: Order,
}

impl Keys {
    /// Builds the run's key order (the permutation costs 4 bytes per key);
    /// an error when this machine cannot hold it, never an abort.
    pub fn new(plan: &Plan) -> Result<Self, TryReserveError> {
        let order = if !plan.distinct_keys() {
            Order::Same
        } else if plan.sequential_keys {
            Order::Sequential
        } else {
            Order::Permuted(permutation(plan.key_space, plan.seed)?)
        };
        Ok(Keys {
            key_size: plan.key_size,
            first: plan.first_key,
            order,
        })
    }

    /// The key number request `r` (counted across the whole run) uses.
    pub fn number(&self, r: u64) -> u64 {
        match &self.order {
            Order::Same => 0,
            Order::Sequential => self.first + r,
            Order::Permuted(perm) => self.first + u64::from(perm[r as usize]),
        }
    }

    /// Request `r`'s key, written into `out`.
    pub fn key_into(&self, r: u64, out: &mut Vec<u8>) {
        let fits = write_key(self.number(r), self.key_size, out);
        // Plan validation checked the key space fits in key_size.
        debug_assert!(
            fits,
            "key {} does not fit in {} bytes",
            self.number(r),
            self.key_size
        );
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
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..bound by multiply-high; the bias (bound / 2^64) is negligible here.
    fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(bound)) >> 64) as u64
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
    fn request_numbers_map_to_keys() {
        let mut plan = crate::plan::tests::good_plan();
        plan.sequential_keys = true;
        let keys = Keys::new(&plan).unwrap();
        let mut out = Vec::new();
        keys.key_into(123, &mut out);
        assert_eq!(out, b"k0000123");

        plan.sequential_keys = false;
        let keys = Keys::new(&plan).unwrap();
        let perm = permutation(plan.key_space, plan.seed).unwrap();
        assert_eq!(keys.number(5), u64::from(perm[5]));

        plan.same_key = true;
        let keys = Keys::new(&plan).unwrap();
        keys.key_into(777, &mut out);
        assert_eq!(out, b"k0000000");

        plan.same_key = false;
        plan.operation = crate::plan::Operation::Read;
        assert_eq!(Keys::new(&plan).unwrap().number(777), 0);
    }

    #[test]
    fn first_key_moves_distinct_keys_only() {
        let mut plan = crate::plan::tests::good_plan();
        plan.first_key = 1000;
        plan.sequential_keys = true;
        let mut out = Vec::new();
        Keys::new(&plan).unwrap().key_into(5, &mut out);
        assert_eq!(out, b"k0001005");

        plan.sequential_keys = false;
        let perm = permutation(plan.key_space, plan.seed).unwrap();
        assert_eq!(
            Keys::new(&plan).unwrap().number(5),
            1000 + u64::from(perm[5])
        );

        plan.same_key = true;
        assert_eq!(Keys::new(&plan).unwrap().number(5), 0);
    }
}
