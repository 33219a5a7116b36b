//! The operations and their mix: each operation's names beside its code,
//! and each request's operation drawn from the plan's shares.

use crate::plan::{PlanError, quoted};

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
    /// Every operation, in the order of its code.
    pub const ALL: [OpKind; 4] = [
        OpKind::Read,
        OpKind::Update,
        OpKind::Insert,
        OpKind::ReadModifyWrite,
    ];

    /// Its name in records and reports (Python's `_engine.OPERATIONS[code]`).
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::ReadModifyWrite => "read-modify-write",
        }
    }

    /// Its key in the plan's `mix` (a Python identifier).
    pub const fn plan_key(self) -> &'static str {
        match self {
            OpKind::ReadModifyWrite => "read_modify_write",
            other => other.name(),
        }
    }
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

/// The plan's `mix`: every operation's share, by its plan key, adding up to 1.
pub fn from_plan(shares: &[(String, f64)]) -> Result<Mix, PlanError> {
    let keys = OpKind::ALL.map(OpKind::plan_key);
    if let Some((unknown, _)) = shares.iter().find(|(k, _)| !keys.contains(&k.as_str())) {
        return Err(PlanError(format!(
            "plan[\"mix\"] has an unknown key {unknown:?}; allowed keys: {}",
            quoted(&keys)
        )));
    }
    let mut ordered = [0.0; 4];
    for (kind, share) in OpKind::ALL.into_iter().zip(&mut ordered) {
        *share = match shares.iter().find(|(k, _)| k == kind.plan_key()) {
            Some((_, value)) => *value,
            None => {
                return Err(PlanError(format!(
                    "plan[\"mix\"] is missing {:?} (a number >= 0 (at most 1))",
                    kind.plan_key()
                )));
            }
        };
    }
    Mix::new(ordered).ok_or_else(|| {
        PlanError(format!(
            "plan[\"mix\"]'s shares must add up to 1, got {}",
            ordered.iter().sum::<f64>()
        ))
    })
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

    /// A plan's `mix` of these shares (read, update, insert,
    /// read-modify-write).
    #[cfg(test)]
    pub fn plan(shares: [f64; 4]) -> Vec<(String, f64)> {
        OpKind::ALL
            .into_iter()
            .zip(shares)
            .map(|(kind, share)| (kind.plan_key().to_owned(), share))
            .collect()
    }

    /// A plan's `mix` where every request does `kind`.
    #[cfg(test)]
    pub fn plan_only(kind: OpKind) -> Vec<(String, f64)> {
        let mut shares = [0.0; 4];
        shares[kind as usize] = 1.0;
        Mix::plan(shares)
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
    fn each_operation_names_itself_once_by_its_code() {
        for (code, kind) in OpKind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, code);
        }
        let names = OpKind::ALL.map(OpKind::name);
        assert_eq!(names, ["read", "update", "insert", "read-modify-write"]);
        let keys = OpKind::ALL.map(OpKind::plan_key);
        assert_eq!(keys, ["read", "update", "insert", "read_modify_write"]);
    }

    #[test]
    fn the_plan_names_every_operation_once() {
        let shares = |pairs: &[(&str, f64)]| -> Vec<(String, f64)> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
        };
        let all = [
            ("read", 0.5),
            ("update", 0.0),
            ("insert", 0.0),
            ("read_modify_write", 0.5),
        ];
        let mix = from_plan(&shares(&all)).unwrap();
        assert_eq!(mix.share(OpKind::ReadModifyWrite), 0.5);
        let error = from_plan(&shares(&all[..3])).unwrap_err().0;
        assert!(
            error.contains(r#"is missing "read_modify_write""#),
            "{error}"
        );
        let mut odd = all.to_vec();
        odd.push(("scan", 0.0));
        let error = from_plan(&shares(&odd)).unwrap_err().0;
        assert!(
            error.starts_with(r#"plan["mix"] has an unknown key "scan""#),
            "{error}"
        );
    }

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
