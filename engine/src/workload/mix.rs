//! The operation mix: each request's operation drawn from the plan's shares.

/// What one request does. The numbers are the records' `op` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OpKind {
    /// Read a key and check its value.
    Read = 0,
    /// Overwrite an existing key.
    Update = 1,
    /// Create a new key.
    Insert = 2,
    /// Read a key, then write it only if nobody wrote it in between.
    ReadModifyWrite = 3,
}

impl OpKind {
    pub const ALL: [OpKind; 4] = [
        OpKind::Read,
        OpKind::Update,
        OpKind::Insert,
        OpKind::ReadModifyWrite,
    ];
}

/// The shares of read, update, insert and read-modify-write, adding up to 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mix {
    shares: [f64; 4],
    /// Where each operation's share ends in [0, 1).
    ends: [f64; 4],
    /// The operation every request does, when there is one (no draw needed).
    single: Option<OpKind>,
}

/// How far the shares may add up from 1 (decimal fractions do not add exactly).
const SUM_TOLERANCE: f64 = 1e-9;

impl Mix {
    /// None when a share is outside [0, 1] or they do not add up to 1.
    pub fn new(shares: [f64; 4]) -> Option<Mix> {
        let sum: f64 = shares.iter().sum();
        if shares.iter().any(|s| !(0.0..=1.0).contains(s)) || (sum - 1.0).abs() > SUM_TOLERANCE {
            return None;
        }
        let mut ends = [0.0; 4];
        let mut end = 0.0;
        for (i, share) in shares.iter().enumerate() {
            end += share;
            ends[i] = end;
        }
        let single = OpKind::ALL
            .into_iter()
            .zip(shares)
            .find(|(_, share)| *share == 1.0)
            .map(|(kind, _)| kind);
        Some(Mix {
            shares,
            ends,
            single,
        })
    }

    /// Every request does `kind`.
    #[cfg(test)]
    pub fn only(kind: OpKind) -> Mix {
        let mut shares = [0.0; 4];
        shares[kind as usize] = 1.0;
        Mix::new(shares).expect("one share of 1")
    }

    pub fn single(&self) -> Option<OpKind> {
        self.single
    }

    pub fn share(&self, kind: OpKind) -> f64 {
        self.shares[kind as usize]
    }

    /// The operation for `u`, uniform in [0, 1).
    pub fn draw(&self, u: f64) -> OpKind {
        OpKind::ALL
            .into_iter()
            .zip(self.ends)
            .find(|(kind, end)| u < *end && self.share(*kind) > 0.0)
            .map(|(kind, _)| kind)
            // u within rounding of 1: the last operation with a share.
            .unwrap_or_else(|| {
                OpKind::ALL
                    .into_iter()
                    .rev()
                    .find(|kind| self.share(*kind) > 0.0)
                    .unwrap_or(OpKind::Read)
            })
    }

    /// Whether any request may create a key.
    pub fn inserts(&self) -> bool {
        self.share(OpKind::Insert) > 0.0
    }

    /// Whether any request chooses among existing keys.
    pub fn chooses(&self) -> bool {
        self.share(OpKind::Insert) < 1.0
    }

    /// Whether any request overwrites a key (and so names its write).
    pub fn overwrites(&self) -> bool {
        self.share(OpKind::Update) > 0.0 || self.share(OpKind::ReadModifyWrite) > 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::keys::SplitMix64;

    #[test]
    fn shares_must_add_up_to_one() {
        assert!(Mix::new([0.5, 0.5, 0.0, 0.0]).is_some());
        assert!(Mix::new([0.95, 0.05, 0.0, 0.0]).is_some());
        assert!(Mix::new([0.1, 0.2, 0.3, 0.4]).is_some()); // 1.0000000000000002
        assert!(Mix::new([0.5, 0.4, 0.0, 0.0]).is_none());
        assert!(Mix::new([1.5, -0.5, 0.0, 0.0]).is_none());
        assert!(Mix::new([f64::NAN, 1.0, 0.0, 0.0]).is_none());
    }

    #[test]
    fn a_single_operation_needs_no_draw() {
        assert_eq!(Mix::only(OpKind::Insert).single(), Some(OpKind::Insert));
        assert_eq!(Mix::new([0.5, 0.5, 0.0, 0.0]).unwrap().single(), None);
        let mix = Mix::only(OpKind::Read);
        assert_eq!(mix.draw(0.999_999_999_999), OpKind::Read);
        assert!(!mix.inserts() && mix.chooses() && !mix.overwrites());
    }

    /// Each operation's share is within 1% of its proportion (YCSB workload
    /// F's 50/50, B's 95/5 and a four-way mix), each request drawing from its
    /// own stream as the engine does. Over 100,000 requests, so that 1% is
    /// six standard deviations of a correct draw (over 10,000 it is two, and
    /// a correct mix would miss it one run in twenty).
    #[test]
    fn the_mix_keeps_its_proportions() {
        for shares in [
            [0.5, 0.0, 0.0, 0.5],
            [0.1, 0.2, 0.3, 0.4],
            [0.95, 0.0, 0.05, 0.0],
        ] {
            let mix = Mix::new(shares).unwrap();
            let mut counts = [0u32; 4];
            let n: u32 = 100_000;
            for r in 0..n {
                let mut rng = SplitMix64::for_request(11, u64::from(r));
                counts[mix.draw(rng.unit()) as usize] += 1;
            }
            for (count, share) in counts.iter().zip(shares) {
                let seen = f64::from(*count) / f64::from(n);
                assert!((seen - share).abs() <= 0.01, "{shares:?}: {counts:?}");
            }
        }
    }
}
