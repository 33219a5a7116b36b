//! What the load does, request by request: pacing (closed and open loop,
//! steps), which operation each request makes (the mix), which key it uses
//! (keys and their distributions), and what it writes and accepts (values).

pub mod distribution;
pub mod keys;
pub mod mix;
pub mod values;
pub mod watch;

pub use crate::driver::{check, pacing, timer};

use std::collections::TryReserveError;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

pub use distribution::Choose;
pub use mix::{Mix, OpKind};
pub use values::ValueForm;

use crate::plan::Plan;
use distribution::{Acked, Chooser};
use keys::{Keys, SplitMix64};
use values::Written;

/// The order new keys are created in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOrder {
    Sequential,
    Permuted,
}

/// One request's operation and the number of the key it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    pub key: u64,
    /// For an insert: which insert of the run it is.
    insert: Option<u64>,
}

/// A run's workload: draws each request's operation and key, makes the
/// values writes store and judges the values reads return.
pub struct Workload {
    keys: Keys,
    chooser: Chooser,
    mix: Mix,
    seed: u64,
    form: ValueForm,
    value_size: usize,
    /// The fixed value, shared by every write (no copy per request).
    fixed: Bytes,
    /// Inserts handed out so far.
    inserts: AtomicU64,
    acked: Acked,
    written: Option<Written>,
}

impl Workload {
    /// An error when this machine cannot hold the run's random orders or
    /// its table of writes.
    pub fn new(plan: &Plan) -> Result<Workload, TryReserveError> {
        let written = if plan.values == ValueForm::Tagged && plan.mix.overwrites() {
            Some(Written::new(plan.write_id_base, plan.total_requests())?)
        } else {
            None
        };
        Ok(Workload {
            keys: Keys::new(plan)?,
            chooser: Chooser::new(plan.keys.choose, plan.keys.existing, plan.seed)?,
            mix: plan.mix,
            seed: plan.seed,
            form: plan.values,
            value_size: plan.value_size,
            fixed: Bytes::from(plan.fixed_value()),
            inserts: AtomicU64::new(0),
            acked: Acked::default(),
            written,
        })
    }

    /// Request `r`'s operation and key. The draws are request r's own
    /// (seeded by the plan's seed and r), so the same seed gives the same
    /// sequence; only inserts (numbered as they are sent) and `latest` (which
    /// follows the acknowledged inserts) depend on timing.
    pub fn draw(&self, r: u64) -> Op {
        // The write and read workloads draw nothing (one operation; one key
        // or the next insert): they seed no stream.
        let mut rng = (self.mix.single().is_none() || self.chooser.draws())
            .then(|| SplitMix64::for_request(self.seed, r));
        let kind = match (self.mix.single(), rng.as_mut()) {
            (Some(kind), _) => kind,
            (None, Some(rng)) => self.mix.draw(rng.unit()),
            (None, None) => unreachable!("a mix of several operations draws"),
        };
        if kind == OpKind::Insert {
            let n = self.inserts.fetch_add(1, Ordering::Relaxed);
            return Op {
                kind,
                key: self.keys.inserted(n),
                insert: Some(n),
            };
        }
        let index = match rng.as_mut() {
            Some(rng) if self.chooser.draws() => self.chooser.pick(rng, self.acked()),
            _ => 0,
        };
        Op {
            kind,
            key: self.keys.number(index),
            insert: None,
        }
    }

    /// Inserts acknowledged without gaps (only `latest` keeps count).
    fn acked(&self) -> u64 {
        if self.chooser.follows_inserts() {
            self.acked.count()
        } else {
            0
        }
    }

    /// Key number `key`'s bytes, written into `out`.
    pub fn key_into(&self, key: u64, out: &mut Vec<u8>) {
        self.keys.key_into(key, out);
    }

    /// What request `r`'s write stores (empty for a read).
    pub fn value(&self, op: &Op, r: u64) -> Bytes {
        match (self.form, op.kind) {
            (_, OpKind::Read) => Bytes::new(),
            (ValueForm::Fixed, _) => self.fixed.clone(),
            (ValueForm::Tagged, OpKind::Insert) => {
                Bytes::from(values::tagged(op.key, 0, self.value_size))
            }
            (ValueForm::Tagged, _) => {
                let writer = self.written.as_ref().map_or(0, |w| w.note(r, op.key));
                Bytes::from(values::tagged(op.key, writer, self.value_size))
            }
        }
    }

    /// Whether `value`, read from key number `key`, is right.
    pub fn accepts(&self, key: u64, value: &[u8]) -> bool {
        match self.form {
            ValueForm::Fixed => value == self.fixed.as_ref(),
            ValueForm::Tagged => {
                values::accepts(value, key, self.value_size, self.written.as_ref())
            }
        }
    }

    /// `op` got its reply (or gave up): an insert now counts for `latest`.
    pub fn finished(&self, op: &Op) {
        if let Some(n) = op.insert
            && self.chooser.follows_inserts()
        {
            self.acked.finished(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::good_plan;

    fn mixed_plan() -> Plan {
        let mut plan = good_plan();
        plan.mix = Mix::new([0.5, 0.3, 0.1, 0.1]).unwrap();
        plan.keys.existing = 100;
        plan.keys.choose = Choose::Zipfian(0.99);
        plan.values = ValueForm::Tagged;
        plan.value_size = 40;
        plan
    }

    #[test]
    fn the_same_seed_gives_the_same_sequence() {
        let draws = |plan: &Plan| {
            let workload = Workload::new(plan).unwrap();
            (0..2000).map(|r| workload.draw(r)).collect::<Vec<_>>()
        };
        let plan = mixed_plan();
        assert_eq!(draws(&plan), draws(&plan));
        let mut other = mixed_plan();
        other.seed += 1;
        assert_ne!(draws(&plan), draws(&other));
    }

    #[test]
    fn inserts_create_new_keys_after_the_existing_ones() {
        let plan = mixed_plan();
        let workload = Workload::new(&plan).unwrap();
        let inserted: Vec<u64> = (0..2000)
            .map(|r| workload.draw(r))
            .filter(|op| op.kind == OpKind::Insert)
            .map(|op| op.key)
            .collect();
        assert!(!inserted.is_empty());
        let mut sorted = inserted.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), inserted.len(), "an insert reused a key");
        assert!(inserted.iter().all(|k| *k >= 100));
    }

    #[test]
    fn reads_accept_the_values_writes_made() {
        let plan = mixed_plan();
        let workload = Workload::new(&plan).unwrap();
        for r in 0..200 {
            let op = workload.draw(r);
            if op.kind == OpKind::Read {
                assert!(workload.value(&op, r).is_empty());
                continue;
            }
            let value = workload.value(&op, r);
            assert_eq!(value.len(), 40);
            assert!(workload.accepts(op.key, &value), "{op:?}");
            assert!(!workload.accepts(op.key + 1, &value));
        }
        let fixed = Workload::new(&good_plan()).unwrap();
        assert!(fixed.accepts(0, &[b'v'; 16]));
        assert!(!fixed.accepts(0, &[b'v'; 15]));
    }
}
