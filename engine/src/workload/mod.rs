//! What the load does, request by request: which operation each request
//! makes (the mix), which key it uses (keys and their distributions), what
//! it writes and accepts (values), and what watchers saw. The names the
//! plan gives these are resolved here, beside their code, and `check`
//! tells whether the engine can run the plan's workload at all.

pub mod distribution;
pub mod keys;
pub mod kubernetes;
pub mod lock;
pub mod mix;
pub mod values;
pub mod watch;

use std::collections::TryReserveError;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

pub use distribution::Choose;
pub use mix::{Mix, OpKind};

use crate::plan::{InsertOrder, Plan, PlanError, ValueForm};
use distribution::{Acked, Chooser};
use keys::{Keys, SplitMix64};
use kubernetes::{Objects, Verb};
use values::Written;

/// Every operation's name by its code: the records' `op` column indexes it.
pub fn operation_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = OpKind::ALL.map(OpKind::name).to_vec();
    for (code, name) in Verb::NAMED.into_iter().chain([lock::ACQUIRE]) {
        debug_assert_eq!(usize::from(code), names.len());
        names.push(name);
    }
    names
}

/// A random order (of inserts, or of zipfian ranks) is kept as u32 key
/// numbers (4 bytes per key), built before the first request: at most 1 GB.
pub const MAX_PERMUTED: u64 = 1 << 28;

/// The plan's workload, its names resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spec {
    pub mix: Mix,
    pub choose: Choose,
}

/// Why a workload cannot be built.
#[derive(Debug)]
pub enum Unfit {
    /// The plan names something unknown or asks what the engine cannot run.
    Plan(PlanError),
    /// This machine cannot hold its random orders or its table of writes.
    Memory,
}

/// Resolves the plan's workload names and checks what the engine needs to
/// run them: key numbers that fit in key_size, a new key for every insert,
/// random orders it can hold, keys to choose from, room in a value for its
/// tag, and watchers only over a run of distinct new keys.
pub fn check(plan: &Plan) -> Result<Spec, PlanError> {
    let mix = mix::from_plan(&plan.mix)?;
    if plan.locks.is_some() {
        // Locks are named by their own numbers; nothing else runs beside them.
        let beside = [
            ("objects", plan.kubernetes.is_some()),
            ("watch", plan.watch.is_some()),
            ("check", plan.check.is_some()),
        ];
        if let Some((key, _)) = beside.iter().find(|(_, there)| *there) {
            return Err(PlanError(format!(
                "plan[\"locks\"] runs alone: plan[\"{key}\"] must be None with it"
            )));
        }
        return Ok(Spec {
            mix,
            choose: Choose::from_plan(&plan.keys)?,
        });
    }
    if let Some(objects) = &plan.kubernetes {
        // Its objects are named by their own numbers: the key-value plan's
        // keys are not used.
        kubernetes::Shares::from_plan(&objects.mix)?;
        if plan.watch.is_some() {
            return Err(PlanError(
                "plan[\"watch\"] needs a key-value write run, not plan[\"objects\"]".into(),
            ));
        }
        return Ok(Spec {
            mix,
            choose: Choose::from_plan(&plan.keys)?,
        });
    }
    let choose = Choose::from_plan(&plan.keys)?;
    let keys = &plan.keys;
    let total = plan.total_requests();
    let inserting = mix.inserts();
    if inserting && keys.insert_space < total {
        return Err(PlanError(format!(
            "plan[\"keys\"][\"insert_space\"] ({}) must be at least the steps' requests \
             added up ({total}): each request may insert a new key",
            keys.insert_space
        )));
    }
    if mix.chooses() && keys.existing == 0 {
        return Err(PlanError(
            "plan[\"keys\"][\"existing\"] must be at least 1: reads, updates and \
             read-modify-writes choose among existing keys"
                .into(),
        ));
    }
    let span = keys
        .existing
        .checked_add(if inserting { keys.insert_space } else { 0 });
    let last = span.and_then(|span| keys.first.checked_add(span));
    if let Some(capacity) = keys::capacity(plan.key_size)
        && last.is_none_or(|last| last > capacity)
    {
        return Err(PlanError(format!(
            "plan[\"keys\"] numbers keys up to first ({}) + existing ({}) + insert_space ({}), \
             which does not fit in plan[\"key_size\"] ({}): {capacity} distinct keys \
             (\"k\" and {} digits); raise key_size",
            keys.first,
            keys.existing,
            if inserting { keys.insert_space } else { 0 },
            plan.key_size,
            plan.key_size - 1
        )));
    }
    if inserting && keys.inserts == InsertOrder::Permuted && keys.insert_space > MAX_PERMUTED {
        return Err(PlanError(format!(
            "plan[\"keys\"][\"insert_space\"] ({}) must be at most {MAX_PERMUTED} with \
             permuted inserts (the random order is kept in memory)",
            keys.insert_space
        )));
    }
    if matches!(choose, Choose::Zipfian(_)) && keys.existing > MAX_PERMUTED {
        return Err(PlanError(format!(
            "plan[\"keys\"][\"existing\"] ({}) must be at most {MAX_PERMUTED} for zipfian \
             keys (ranks are mapped to keys by a random order kept in memory)",
            keys.existing
        )));
    }
    if plan.values == ValueForm::Tagged && plan.value_size < values::TAG_LEN {
        return Err(PlanError(format!(
            "plan[\"value_size\"] ({}) must be at least {} for tagged values",
            plan.value_size,
            values::TAG_LEN
        )));
    }
    // Watchers time the events of a write run's distinct keys: its puts
    // must all be inserts of new keys.
    if plan.watch.is_some() && (mix.single() != Some(OpKind::Insert) || keys.existing != 0) {
        return Err(PlanError(
            "plan[\"watch\"] needs a write run of distinct keys (mix: insert only, keys: existing 0)".into(),
        ));
    }
    Ok(Spec { mix, choose })
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
    /// Kubernetes' traffic, which chooses its own objects.
    objects: Option<Objects>,
    /// Locks contended for, instead of keys.
    locks: Option<lock::Locks>,
}

impl Workload {
    /// The plan's workload (`check`ed first); an error when the engine
    /// cannot run it or this machine cannot hold its random orders or its
    /// table of writes.
    pub fn new(plan: &Plan) -> Result<Workload, Unfit> {
        let Spec { mix, choose } = check(plan).map_err(Unfit::Plan)?;
        let written = if plan.values == ValueForm::Tagged && mix.overwrites() {
            Some(
                Written::new(plan.write_id_base, plan.total_requests())
                    .map_err(|_: TryReserveError| Unfit::Memory)?,
            )
        } else {
            None
        };
        Ok(Workload {
            keys: Keys::new(plan, mix.inserts()).map_err(|_: TryReserveError| Unfit::Memory)?,
            chooser: Chooser::new(choose, plan.keys.existing, plan.seed)
                .map_err(|_: TryReserveError| Unfit::Memory)?,
            mix,
            seed: plan.seed,
            form: plan.values,
            value_size: plan.value_size,
            fixed: Bytes::from(plan.fixed_value()),
            inserts: AtomicU64::new(0),
            acked: Acked::default(),
            written,
            objects: match &plan.kubernetes {
                Some(objects) => Some(Objects::new(objects, plan.seed).map_err(Unfit::Plan)?),
                None => None,
            },
            locks: plan
                .locks
                .as_ref()
                .map(|locks| lock::Locks::new(locks, plan.seed)),
        })
    }

    /// The fixed value (what Kubernetes' traffic writes: every object is
    /// the plan's `value_size` bytes).
    pub fn fixed(&self) -> Bytes {
        self.fixed.clone()
    }

    /// Kubernetes' objects, when the run is its traffic.
    pub fn objects(&self) -> Option<&Objects> {
        self.objects.as_ref()
    }

    /// The locks, when the run contends for locks.
    pub fn locks(&self) -> Option<&lock::Locks> {
        self.locks.as_ref()
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
        plan.mix = Mix::plan([0.5, 0.3, 0.1, 0.1]);
        plan.keys.existing = 100;
        plan.keys.choose = "zipfian".into();
        plan.keys.zipfian_constant = 0.99;
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
