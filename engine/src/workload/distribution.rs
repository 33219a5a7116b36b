//! Which existing key a read, update or read-modify-write uses: YCSB's
//! request distributions.
//!
//! - `uniform`: every existing key alike.
//! - `zipfian`: key of rank r (1 = most popular) gets r^-θ / H(n, θ) of the
//!   requests, θ = `zipfian_constant` (YCSB's 0.99 by default); ranks are
//!   mapped to keys by a seeded random order, so popular keys are scattered
//!   over the key space rather than being its first ones.
//! - `latest`: zipfian over recency: the newest acknowledged insert is rank 1,
//!   the one before it rank 2, and so on back through the existing keys.
//! - `hotspot`: `hot_operation_fraction` of the requests go to the first
//!   `hot_set_fraction` of the keys, uniformly; the rest to the others.
//!
//! Zipfian ranks are drawn exactly (not with YCSB's approximation) by
//! rejection-inversion (W. Hörmann and G. Derflinger, "Rejection-inversion to
//! generate variates from monotone discrete distributions", ACM TOMACS 6(3),
//! 1996): O(1) time and memory per draw for any n, so `latest`'s growing n
//! costs nothing to follow.

use std::collections::{BTreeSet, TryReserveError};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::plan::{KeyPlan, PlanError, quoted};
use crate::workload::keys::{SplitMix64, permutation};

/// How keys are chosen among the existing ones.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Choose {
    /// Always the first key (the read workload's one key; same_key writes).
    Same,
    Uniform,
    /// With this constant (θ).
    Zipfian(f64),
    /// Zipfian over recency, with this constant.
    Latest(f64),
    Hotspot {
        hot_set: f64,
        hot_operations: f64,
    },
}

/// Every distribution's name in the plan (`keys.choose`).
const NAMES: [&str; 5] = [SAME, "uniform", "zipfian", "latest", "hotspot"];
/// `same`'s name: the one key (ZooKeeper creates it when missing).
pub const SAME: &str = "same";

impl Choose {
    /// The plan's `keys.choose`, with the parameters it takes.
    pub fn from_plan(keys: &KeyPlan) -> Result<Choose, PlanError> {
        Ok(match keys.choose.as_str() {
            SAME => Choose::Same,
            "uniform" => Choose::Uniform,
            "zipfian" => Choose::Zipfian(keys.zipfian_constant),
            "latest" => Choose::Latest(keys.zipfian_constant),
            "hotspot" => Choose::Hotspot {
                hot_set: keys.hot_set_fraction,
                hot_operations: keys.hot_operation_fraction,
            },
            other => {
                return Err(PlanError(format!(
                    "plan[\"keys\"][\"choose\"] must be one of {}, got {other:?}",
                    quoted(&NAMES)
                )));
            }
        })
    }
}

/// Zipf's law over ranks 1..=n with exponent `s`, sampled by rejection-inversion.
#[derive(Debug, Clone, Copy)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    cut: f64,
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Zipf {
        let n = n.max(1) as f64;
        let mut zipf = Zipf {
            n,
            s,
            h_x1: 0.0,
            h_n: 0.0,
            cut: 0.0,
        };
        zipf.h_x1 = zipf.big_h(1.5) - 1.0;
        zipf.h_n = zipf.big_h(n + 0.5);
        zipf.cut = 2.0 - zipf.big_h_inverse(zipf.big_h(2.5) - zipf.h(2.0));
        zipf
    }

    /// A rank from 1 to n.
    pub fn sample(&self, rng: &mut SplitMix64) -> u64 {
        loop {
            let u = self.h_n + rng.unit() * (self.h_x1 - self.h_n);
            let x = self.big_h_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.cut || u >= self.big_h(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    /// The density: x^-s.
    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// An antiderivative of h: (x^(1-s) - 1) / (1 - s), and ln x at s = 1,
    /// computed without cancellation near s = 1.
    fn big_h(&self, x: f64) -> f64 {
        let log_x = x.ln();
        expm1_over_x((1.0 - self.s) * log_x) * log_x
    }

    fn big_h_inverse(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.s)).max(-1.0);
        (ln1p_over_x(t) * y).exp()
    }
}

/// (e^x - 1) / x, and 1 at x = 0.
fn expm1_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x / 2.0 * (1.0 + x / 3.0 * (1.0 + x / 4.0))
    }
}

/// ln(1 + x) / x, and 1 at x = 0.
fn ln1p_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// Picks the index of an existing key (0 .. existing, or beyond it for
/// `latest`'s acknowledged inserts).
pub struct Chooser {
    choose: Choose,
    existing: u64,
    /// zipfian: rank r's key is ranks[r - 1].
    ranks: Vec<u32>,
    zipf: Option<Zipf>,
}

impl Chooser {
    pub fn new(choose: Choose, existing: u64, seed: u64) -> Result<Chooser, TryReserveError> {
        let (ranks, zipf) = match choose {
            // A different order from the inserts' (same seed, other stream).
            Choose::Zipfian(s) => (
                permutation(existing, seed ^ 0x5A5A_5A5A_5A5A_5A5A)?,
                Some(Zipf::new(existing, s)),
            ),
            _ => (Vec::new(), None),
        };
        Ok(Chooser {
            choose,
            existing,
            ranks,
            zipf,
        })
    }

    /// The index of the key to use; `acked` inserts are known to exist.
    pub fn pick(&self, rng: &mut SplitMix64, acked: u64) -> u64 {
        match self.choose {
            Choose::Same => 0,
            Choose::Uniform => rng.below(self.existing),
            Choose::Zipfian(_) => {
                let rank = self.zipf.map_or(1, |z| z.sample(rng));
                u64::from(self.ranks[(rank - 1) as usize])
            }
            Choose::Latest(s) => {
                let n = self.existing + acked;
                n - Zipf::new(n, s).sample(rng)
            }
            Choose::Hotspot {
                hot_set,
                hot_operations,
            } => {
                let hot = ((self.existing as f64 * hot_set) as u64).clamp(1, self.existing);
                let cold = self.existing - hot;
                if cold == 0 || rng.unit() < hot_operations {
                    rng.below(hot)
                } else {
                    hot + rng.below(cold)
                }
            }
        }
    }

    /// Whether picking draws random numbers (`same` does not).
    pub fn draws(&self) -> bool {
        self.choose != Choose::Same
    }

    pub fn follows_inserts(&self) -> bool {
        matches!(self.choose, Choose::Latest(_))
    }
}

/// How many inserts are acknowledged, counted without gaps: insert n counts
/// once inserts 0..n have all finished (a failed one too: it is not waited
/// for forever), so `latest` never picks a key whose insert is in flight.
#[derive(Default)]
pub struct Acked {
    done: AtomicU64,
    /// Finished inserts past the first gap.
    ahead: Mutex<BTreeSet<u64>>,
}

impl Acked {
    pub fn count(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    pub fn finished(&self, n: u64) {
        let mut ahead = self.ahead.lock().unwrap_or_else(|e| e.into_inner());
        let mut done = self.done.load(Ordering::Acquire);
        if n != done {
            ahead.insert(n);
            return;
        }
        done += 1;
        while ahead.remove(&done) {
            done += 1;
        }
        self.done.store(done, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn harmonic(n: u64, s: f64) -> f64 {
        (1..=n).map(|k| (k as f64).powf(-s)).sum()
    }

    /// The 10 most popular keys get their theoretical shares (r^-θ / H(n, θ))
    /// within 5%, for YCSB's θ and others. Over 1,000,000 draws: rank 10 of
    /// 100,000 keys gets about 0.8% of them, and over 100,000 draws 5% of
    /// that would be only 1.5 standard deviations of a correct sampler.
    #[test]
    fn zipfian_top_ranks_get_their_shares() {
        for (n, s) in [
            (1000u64, 0.99),
            (100_000, 0.99),
            (500, 1.0),
            (2000, 0.5),
            (50, 1.5),
        ] {
            let chooser = Chooser::new(Choose::Zipfian(s), n, 9).unwrap();
            let mut counts = vec![0u32; n as usize];
            let mut rng = SplitMix64::new(4);
            let draws = 1_000_000;
            for _ in 0..draws {
                counts[chooser.pick(&mut rng, 0) as usize] += 1;
            }
            let h = harmonic(n, s);
            for rank in 1..=10u64 {
                let key = chooser.ranks[(rank - 1) as usize] as usize;
                let expected = (rank as f64).powf(-s) / h;
                let seen = f64::from(counts[key]) / f64::from(draws);
                assert!(
                    (seen - expected).abs() <= 0.05 * expected,
                    "n {n} θ {s} rank {rank}: {seen:.5} vs {expected:.5}"
                );
            }
        }
    }

    #[test]
    fn zipf_stays_in_range() {
        let mut rng = SplitMix64::new(1);
        for n in [1u64, 2, 3, 10] {
            let zipf = Zipf::new(n, 0.99);
            for _ in 0..10_000 {
                assert!((1..=n).contains(&zipf.sample(&mut rng)));
            }
        }
    }

    #[test]
    fn ranks_are_scattered_by_the_seed() {
        let a = Chooser::new(Choose::Zipfian(0.99), 1000, 1).unwrap();
        let b = Chooser::new(Choose::Zipfian(0.99), 1000, 2).unwrap();
        assert_ne!(a.ranks[..10], b.ranks[..10]);
    }

    /// `latest` picks the newest acknowledged insert most often, then the
    /// one before it, as zipfian ranks 1, 2, ... over recency.
    #[test]
    fn latest_favours_the_newest_inserts() {
        let chooser = Chooser::new(Choose::Latest(0.99), 1000, 3).unwrap();
        let mut rng = SplitMix64::new(5);
        let acked = 200;
        let n = 1000 + acked;
        let mut counts = vec![0u32; n as usize];
        let draws = 1_000_000;
        for _ in 0..draws {
            let index = chooser.pick(&mut rng, acked);
            assert!(index < n);
            counts[index as usize] += 1;
        }
        let h = harmonic(n, 0.99);
        for age in 0..5u64 {
            let expected = ((age + 1) as f64).powf(-0.99) / h;
            let seen = f64::from(counts[(n - 1 - age) as usize]) / f64::from(draws);
            assert!(
                (seen - expected).abs() <= 0.05 * expected,
                "age {age}: {seen}"
            );
        }
        // Never past the acknowledged inserts.
        let none_beyond = Chooser::new(Choose::Latest(0.99), 10, 3).unwrap();
        assert!((0..1000).all(|_| none_beyond.pick(&mut rng, 0) < 10));
    }

    /// The hot set's share of the requests is within 1% of
    /// hot_operation_fraction, and every hot pick lies in the hot set.
    #[test]
    fn hotspot_keeps_its_hot_share() {
        let chooser = Chooser::new(
            Choose::Hotspot {
                hot_set: 0.2,
                hot_operations: 0.8,
            },
            10_000,
            3,
        )
        .unwrap();
        let mut rng = SplitMix64::new(6);
        let draws = 100_000;
        let hot = (0..draws)
            .filter(|_| chooser.pick(&mut rng, 0) < 2000)
            .count();
        let share = hot as f64 / f64::from(draws);
        assert!((share - 0.8).abs() <= 0.01, "{share}");
    }

    #[test]
    fn uniform_covers_the_keys_evenly() {
        let chooser = Chooser::new(Choose::Uniform, 10, 3).unwrap();
        let mut rng = SplitMix64::new(7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[chooser.pick(&mut rng, 0) as usize] += 1;
        }
        assert!(
            counts.iter().all(|c| (9_500..10_500).contains(c)),
            "{counts:?}"
        );
    }

    #[test]
    fn acknowledged_inserts_count_without_gaps() {
        let acked = Acked::default();
        acked.finished(1);
        acked.finished(2);
        assert_eq!(acked.count(), 0); // insert 0 is still in flight
        acked.finished(0);
        assert_eq!(acked.count(), 3);
        acked.finished(4);
        assert_eq!(acked.count(), 3);
        acked.finished(3);
        assert_eq!(acked.count(), 5);
    }
}
