//! Kubernetes' traffic as kube-apiserver sends it to etcd: objects under
//! `/registry/<resource>/<namespace>/<name>`, read one at a time (get) or a
//! page at a time (list), written only by transactions on the object's
//! mod_revision (create: none yet; update and delete: the one last seen).
//!
//! This module holds what the traffic needs to know, not how it is sent
//! (`driver::kubernetes` sends it through the protocol): the shares of the
//! five verbs, the objects' names, and the table of objects the client has
//! seen, with the mod_revision each was last seen at, as the apiserver's
//! watch cache supplies the `expected` revision of its writes. The table
//! also holds the object count between half and one and a half times the
//! objects the load phase made (as etcd's robustness traffic does), and
//! says at the end how many objects the database must hold.
//!
//! Events are apart from the table: each is created once under a name of
//! its own, with a lease the apiserver's way (`LeaseBook`), and expires
//! with it; expirations are counted per second as a watcher sees them.

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::plan::{EventsPlan, KubernetesPhase, KubernetesPlan, PlanError, quoted};
use crate::workload::OpKind;
use crate::workload::keys::SplitMix64;

/// What one request of the traffic does. The numbers are the records' `op`
/// column, shared with `OpKind` (an update is `OpKind::Update`'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    List,
    Create,
    Update,
    Delete,
    /// A create of an event, with a lease.
    Event,
}

impl Verb {
    /// In the order of the plan's shares.
    pub const ALL: [Verb; 6] = [
        Verb::Get,
        Verb::List,
        Verb::Create,
        Verb::Update,
        Verb::Delete,
        Verb::Event,
    ];
    /// The codes after `OpKind`'s that the traffic adds, and their names.
    pub const NAMED: [(u8, &'static str); 5] = [
        (4, "get"),
        (5, "list"),
        (6, "create"),
        (7, "delete"),
        (8, "event"),
    ];

    /// Its key in the plan's `mix` and its name in the records.
    pub const fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Delete => "delete",
            Verb::Event => "event",
        }
    }

    /// The records' `op` code.
    pub const fn code(self) -> u8 {
        match self {
            Verb::Get => 4,
            Verb::List => 5,
            Verb::Create => 6,
            Verb::Update => OpKind::Update as u8,
            Verb::Delete => 7,
            Verb::Event => 8,
        }
    }

    /// Whether it changes an object of the table (its failure leaves the
    /// object's existence unknown); an event is no object of the table.
    pub const fn writes(self) -> bool {
        matches!(self, Verb::Create | Verb::Update | Verb::Delete)
    }
}

/// The verbs' shares, adding up to 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    ends: [f64; 6],
}

/// How far the shares may add up from 1.
const SUM_TOLERANCE: f64 = 1e-9;

impl Shares {
    /// The plan's `kubernetes.mix`: every verb's share by its name, adding up to 1.
    pub fn from_plan(mix: &[(String, f64)]) -> Result<Shares, PlanError> {
        let names = Verb::ALL.map(Verb::name);
        if let Some((unknown, _)) = mix.iter().find(|(k, _)| !names.contains(&k.as_str())) {
            return Err(PlanError(format!(
                "plan[\"objects\"][\"mix\"] has an unknown key {unknown:?}; allowed keys: {}",
                quoted(&names)
            )));
        }
        let mut ends = [0.0; 6];
        let mut end = 0.0;
        for (verb, slot) in Verb::ALL.into_iter().zip(&mut ends) {
            let Some((_, share)) = mix.iter().find(|(k, _)| k == verb.name()) else {
                return Err(PlanError(format!(
                    "plan[\"objects\"][\"mix\"] is missing {:?}",
                    verb.name()
                )));
            };
            end += share;
            *slot = end;
        }
        if (end - 1.0).abs() > SUM_TOLERANCE {
            return Err(PlanError(format!(
                "plan[\"objects\"][\"mix\"]'s shares must add up to 1, got {end}"
            )));
        }
        Ok(Shares { ends })
    }

    /// The verb for `u`, uniform in [0, 1).
    fn draw(&self, u: f64) -> Verb {
        let mut last = Verb::Update;
        let mut start = 0.0;
        for (verb, end) in Verb::ALL.into_iter().zip(self.ends) {
            if end > start {
                if u < end {
                    return verb;
                }
                last = verb;
            }
            start = end;
        }
        last // u within rounding of 1
    }
}

/// One request's work: the verb, the object's number, and the mod_revision
/// its write expects (the one last seen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    pub verb: Verb,
    pub object: u64,
    pub expected: i64,
    /// When it was drawn, on the table's clock: what it sees later than
    /// a failure before then can settle that failure's doubt.
    tick: u64,
}

/// What the client knows of one object (by default: absent, never seen).
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// Its mod_revision when last seen; 0: absent.
    mod_revision: i64,
    /// The revision it was last seen at (a reply's header): an older
    /// reply arriving later changes nothing.
    seen_at: i64,
    /// Its index in `present` (present objects only).
    at: usize,
    /// A write of it failed at this tick, outcome unknown: until something
    /// drawn after that sees it, it may or may not exist.
    doubt: Option<u64>,
}

#[derive(Debug, Default)]
struct Table {
    slots: HashMap<u64, Slot>,
    /// The numbers of the objects known to exist, to draw from.
    present: Vec<u64>,
    /// The next number a create names (names are never reused, as
    /// generated names are not).
    next: u64,
}

/// The bytes of a value its write's send time takes (see `Objects::stamped`).
const STAMP: usize = 8;

/// Counts kept beside the records (the table's rows).
#[derive(Debug, Default)]
struct Counts {
    update_conflicts: AtomicU64,
    update_retries: AtomicU64,
    delete_conflicts: AtomicU64,
    delete_retries: AtomicU64,
    create_skipped: AtomicU64,
    delete_skipped: AtomicU64,
    list_pages: AtomicU64,
    list_objects: AtomicU64,
    list_bytes: AtomicU64,
    /// Lists whose pinned revision was compacted away under them, done again.
    list_restarts: AtomicU64,
    compactions: AtomicU64,
    /// Leases granted for events.
    event_leases: AtomicU64,
}

/// kube-apiserver's lease manager: the lease events are attached to,
/// reused until it is `reuse` old or holds `max` events, then another is
/// granted with a TTL of the events' TTL plus `reuse` (so that every event
/// lives at least its TTL).
#[derive(Debug, Default)]
pub struct LeaseBook {
    id: i64,
    granted: Option<Instant>,
    attached: u64,
}

impl LeaseBook {
    /// The lease to attach one more event to at `now` (None: grant another).
    pub fn take(&mut self, now: Instant, plan: &EventsPlan) -> Option<i64> {
        let granted = self.granted?;
        if now.saturating_duration_since(granted) >= plan.reuse
            || self.attached >= plan.max_per_lease
        {
            return None;
        }
        self.attached += 1;
        Some(self.id)
    }

    /// Lease `id` was granted at `now`; the event being created is its first.
    pub fn granted(&mut self, id: i64, now: Instant) {
        *self = LeaseBook {
            id,
            granted: Some(now),
            attached: 1,
        };
    }
}

/// What a prefix ranges over: the prefix, and the key after every key that
/// starts with it.
fn prefix_range(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    let from = prefix.as_bytes().to_vec();
    let mut end = from.clone();
    if let Some(last) = end.last_mut() {
        *last += 1; // the plan's prefixes end in '/', so this never overflows
    }
    (from, end)
}

/// The TTL a lease for events is granted with: theirs plus the reuse time.
pub fn lease_ttl_s(plan: &EventsPlan) -> i64 {
    plan.ttl_s + plan.reuse.as_secs_f64().ceil() as i64
}

/// One compaction: when its Compact was sent, when its reply came (the
/// backend's removal done), and the revision it compacted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    pub started: Instant,
    pub ended: Instant,
    pub revision: i64,
}

/// The traffic's objects and what the client has seen of them.
#[derive(Debug)]
pub struct Objects {
    plan: KubernetesPlan,
    shares: Shares,
    seed: u64,
    table: Mutex<Table>,
    ticks: AtomicU64,
    counts: Counts,
    /// Every compaction of the run, in order.
    compacted: Mutex<Vec<Compacted>>,
    /// What a write's stamp counts from (see `stamped`).
    origin: Instant,
    /// The next event's number (names are never reused).
    next_event: AtomicU64,
    /// The lease events are attached to; held across a grant, as the
    /// apiserver's lease manager holds its lock.
    pub leases: tokio::sync::Mutex<LeaseBook>,
    /// Expirations seen in each second since `origin`.
    expired: Mutex<Vec<u64>>,
}

/// The objects a run's end may find: at least `low`, at most `high`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub low: u64,
    pub high: u64,
}

/// The objects a list found after the load against the table: those the
/// table knows to exist that the list lacks, and those it lists that the
/// table knows to be gone or never heard of. An object whose last write's
/// outcome is unknown may be either.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Audit {
    pub lost: u64,
    pub unexpected: u64,
}

impl Objects {
    pub fn new(plan: &KubernetesPlan, seed: u64) -> Result<Objects, PlanError> {
        Ok(Objects {
            shares: Shares::from_plan(&plan.mix)?,
            plan: plan.clone(),
            seed,
            table: Mutex::new(Table {
                next: plan.first + plan.count,
                ..Table::default()
            }),
            ticks: AtomicU64::new(1),
            counts: Counts::default(),
            compacted: Mutex::new(Vec::new()),
            origin: Instant::now(),
            next_event: AtomicU64::new(0),
            leases: tokio::sync::Mutex::new(LeaseBook::default()),
            expired: Mutex::new(Vec::new()),
        })
    }

    pub fn phase(&self) -> KubernetesPhase {
        self.plan.phase
    }

    pub fn page_size(&self) -> u64 {
        self.plan.page_size
    }

    /// What a list ranges over: the prefix, and the key after every key
    /// that starts with it.
    pub fn range(&self) -> (Vec<u8>, Vec<u8>) {
        prefix_range(&self.plan.prefix)
    }

    /// Object `n`'s key, written into `out`: its namespace is `n` modulo
    /// the namespaces, so a namespace's objects are spread over the numbers.
    pub fn key_into(&self, n: u64, out: &mut Vec<u8>) {
        self.name_into(&self.plan.prefix, "obj", n, out);
    }

    /// Event `n`'s key, written into `out`, named as an object is.
    pub fn event_key_into(&self, n: u64, out: &mut Vec<u8>) {
        self.name_into(&self.plan.events.prefix, "ev", n, out);
    }

    fn name_into(&self, prefix: &str, kind: &str, n: u64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(prefix.as_bytes());
        let _ = write!(out, "ns-{}/{kind}-{n:010}", n % self.plan.namespaces);
    }

    /// What events are created under: the prefix, and the key after every
    /// key that starts with it.
    pub fn events_range(&self) -> (Vec<u8>, Vec<u8>) {
        prefix_range(&self.plan.events.prefix)
    }

    /// How events are leased.
    pub fn events(&self) -> &EventsPlan {
        &self.plan.events
    }

    /// Whether the run creates events (a watcher then counts expirations).
    pub fn creates_events(&self) -> bool {
        self.plan.phase == KubernetesPhase::Run
            && self
                .plan
                .mix
                .iter()
                .any(|(verb, share)| verb == Verb::Event.name() && *share > 0.0)
    }

    /// A lease for events was granted.
    pub fn lease_granted(&self) {
        self.counts.event_leases.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` events were seen deleted (expired) at `at`.
    pub fn expired(&self, n: u64, at: Instant) {
        let second = at.saturating_duration_since(self.origin).as_secs() as usize;
        let mut expired = self.expired.lock().unwrap_or_else(PoisonError::into_inner);
        if expired.len() <= second {
            expired.resize(second + 1, 0);
        }
        expired[second] += n;
    }

    /// Expirations per second since the origin (which `origin` returns).
    pub fn expirations(&self) -> Vec<u64> {
        self.expired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What the table's clock counts from.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The number of the object at `key`, if it is one of this traffic's.
    pub fn number_of(&self, key: &[u8]) -> Option<u64> {
        let rest = key.strip_prefix(self.plan.prefix.as_bytes())?;
        let at = rest.windows(5).rposition(|w| w == b"/obj-")?;
        let digits = &rest[at + 5..];
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tick(&self) -> u64 {
        self.ticks.fetch_add(1, Ordering::Relaxed)
    }

    /// Request `r`'s task. The verb is request r's own draw (seeded by the
    /// plan's seed and r); the object depends on what the table holds then.
    /// A create with the count at one and a half times `objects`, or a
    /// delete with it at half, becomes an update (counted as skipped); a
    /// verb that needs an object when there is none becomes a create.
    pub fn draw(&self, r: u64) -> Task {
        let tick = self.tick();
        let task = |verb, object, expected| Task {
            verb,
            object,
            expected,
            tick,
        };
        match self.plan.phase {
            KubernetesPhase::Load => return task(Verb::Create, self.plan.first + r, 0),
            KubernetesPhase::Read => return task(Verb::Get, self.plan.first, 0),
            KubernetesPhase::Run => {}
        }
        let mut rng = SplitMix64::for_request(self.seed, r);
        let mut verb = self.shares.draw(rng.unit());
        if verb == Verb::Event {
            // an event is no object of the table: its lock is not needed
            let event = self.next_event.fetch_add(1, Ordering::Relaxed);
            return task(verb, event, 0);
        }
        let mut table = self.table();
        let live = table.present.len() as u64;
        if verb == Verb::Create && 2 * live >= 3 * self.plan.count {
            self.counts.create_skipped.fetch_add(1, Ordering::Relaxed);
            verb = Verb::Update;
        } else if verb == Verb::Delete && 2 * live <= self.plan.count {
            self.counts.delete_skipped.fetch_add(1, Ordering::Relaxed);
            verb = Verb::Update;
        }
        if verb == Verb::List {
            return task(verb, 0, 0);
        }
        if verb == Verb::Create || table.present.is_empty() {
            let object = table.next;
            table.next += 1;
            return task(Verb::Create, object, 0);
        }
        let index = rng.below(live) as usize;
        let object = table.present[index];
        let expected = table.slots.get(&object).map_or(0, |s| s.mod_revision);
        task(verb, object, expected)
    }

    /// A list that is no request of the run (the table's first sight).
    pub fn draw_list(&self) -> Task {
        Task {
            verb: Verb::List,
            object: 0,
            expected: 0,
            tick: self.tick(),
        }
    }

    /// `task`'s object was seen at `revision`: with mod_revision
    /// `mod_revision`, or absent (None). A sight older than the last one
    /// changes nothing; one drawn after a failed write settles its doubt.
    pub fn saw(&self, task: &Task, revision: i64, mod_revision: Option<i64>) {
        self.saw_object(task.object, task.tick, revision, mod_revision);
    }

    /// As `saw`, for an object a list found.
    pub fn listed(&self, task: &Task, key: &[u8], revision: i64, mod_revision: i64) {
        if let Some(object) = self.number_of(key) {
            self.saw_object(object, task.tick, revision, Some(mod_revision));
        }
    }

    fn saw_object(&self, object: u64, tick: u64, revision: i64, mod_revision: Option<i64>) {
        let mut table = self.table();
        let table = &mut *table;
        let slot = table.slots.entry(object).or_default();
        if slot.doubt.is_some_and(|failed| tick > failed) {
            slot.doubt = None;
        }
        if revision < slot.seen_at {
            return;
        }
        slot.seen_at = revision;
        let was = slot.mod_revision > 0;
        let now = mod_revision.unwrap_or(0);
        slot.mod_revision = now;
        if now > 0 && !was {
            slot.at = table.present.len();
            table.present.push(object);
        } else if now == 0 && was {
            let at = slot.at;
            table.present.swap_remove(at);
            if let Some(&moved) = table.present.get(at)
                && let Some(other) = table.slots.get_mut(&moved)
            {
                other.at = at;
            }
        }
        if object >= table.next {
            table.next = object + 1;
        }
    }

    /// `task` ended without a known outcome (a timeout, a lost connection):
    /// a write may or may not have been applied.
    pub fn failed(&self, task: &Task) {
        if !task.verb.writes() {
            return;
        }
        let tick = self.tick();
        let mut table = self.table();
        let slot = table.slots.entry(task.object).or_default();
        slot.doubt = Some(tick);
    }

    /// A compare failed: the object had changed since it was last seen.
    pub fn conflict(&self, verb: Verb) {
        let counter = match verb {
            Verb::Delete => &self.counts.delete_conflicts,
            _ => &self.counts.update_conflicts,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A write sent again after its compare failed (as GuaranteedUpdate does).
    pub fn retry(&self, verb: Verb) {
        let counter = match verb {
            Verb::Delete => &self.counts.delete_retries,
            _ => &self.counts.update_retries,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A list's page arrived with `objects` objects in `bytes` bytes.
    pub fn page(&self, objects: usize, bytes: usize) {
        self.counts.list_pages.fetch_add(1, Ordering::Relaxed);
        self.counts
            .list_objects
            .fetch_add(objects as u64, Ordering::Relaxed);
        self.counts
            .list_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A list's revision was compacted away before its last page.
    pub fn list_restarted(&self) {
        self.counts.list_restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// A compaction ran (its Compact call's send and reply).
    pub fn compacted(&self, done: Compacted) {
        self.counts.compactions.fetch_add(1, Ordering::Relaxed);
        self.compacted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(done);
    }

    /// Every compaction so far, in order.
    pub fn compactions(&self) -> Vec<Compacted> {
        self.compacted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How often to compact, as kube-apiserver does (None: never, and
    /// never in a load phase or readiness read: only a run compacts).
    pub fn compaction(&self) -> Option<std::time::Duration> {
        self.plan
            .compaction
            .filter(|_| self.plan.phase == KubernetesPhase::Run)
    }

    /// How many informers watch the objects (none but in a run).
    pub fn informers(&self) -> usize {
        match self.plan.phase {
            KubernetesPhase::Run => self.plan.informers,
            _ => 0,
        }
    }

    /// `value` with its first 8 bytes the time it is sent (ns since the
    /// table's origin, little-endian), so that an informer receiving the
    /// event can tell how long it took; unchanged without informers, or
    /// when the value is too short to hold it.
    pub fn stamped(&self, value: Bytes) -> Bytes {
        if self.informers() == 0 || value.len() < STAMP {
            return value;
        }
        let mut stamped = BytesMut::from(&value[..]);
        stamped[..STAMP].copy_from_slice(&self.since_origin().to_le_bytes());
        stamped.freeze()
    }

    /// When a stamped value was sent, in ns since the origin (None: it
    /// carries no stamp of this run: shorter, or from the future).
    pub fn stamp_of(&self, value: &[u8]) -> Option<u64> {
        let stamp = u64::from_le_bytes(value.get(..STAMP)?.try_into().ok()?);
        (stamp <= self.since_origin()).then_some(stamp)
    }

    /// Nanoseconds since the origin.
    pub fn since_origin(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// How many objects the database must hold now: those known to exist,
    /// give or take those whose last write's outcome is unknown.
    pub fn expected(&self) -> Expected {
        let table = self.table();
        let present = table.present.len() as u64;
        let (mut maybe_gone, mut maybe_there) = (0, 0);
        for slot in table.slots.values().filter(|s| s.doubt.is_some()) {
            if slot.mod_revision > 0 {
                maybe_gone += 1;
            } else {
                maybe_there += 1;
            }
        }
        Expected {
            low: present - maybe_gone,
            high: present + maybe_there,
        }
    }

    /// The keys `listed` after the load (every object of the traffic's
    /// prefix) against what the table knows of each.
    pub fn audit<'k>(&self, listed: impl IntoIterator<Item = &'k [u8]>) -> Audit {
        let table = self.table();
        let mut audit = Audit::default();
        let mut found = HashSet::new();
        for key in listed {
            let known = self.number_of(key).and_then(|n| {
                found.insert(n);
                table.slots.get(&n)
            });
            if !known.is_some_and(|slot| slot.mod_revision > 0 || slot.doubt.is_some()) {
                audit.unexpected += 1;
            }
        }
        audit.lost = table
            .slots
            .iter()
            .filter(|(n, slot)| {
                slot.mod_revision > 0 && slot.doubt.is_none() && !found.contains(*n)
            })
            .count() as u64;
        audit
    }

    /// The counts for the records: conflicts, retries, skipped verbs, list
    /// pages, objects and bytes, and the objects the end must find.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counts;
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let expected = self.expected();
        vec![
            ("update_conflicts", read(&c.update_conflicts)),
            ("update_retries", read(&c.update_retries)),
            ("delete_conflicts", read(&c.delete_conflicts)),
            ("delete_retries", read(&c.delete_retries)),
            ("create_skipped", read(&c.create_skipped)),
            ("delete_skipped", read(&c.delete_skipped)),
            ("list_pages", read(&c.list_pages)),
            ("list_objects", read(&c.list_objects)),
            ("list_bytes", read(&c.list_bytes)),
            ("list_restarts", read(&c.list_restarts)),
            ("compactions", read(&c.compactions)),
            ("event_leases", read(&c.event_leases)),
            ("expirations", self.expirations().iter().sum()),
            ("objects_low", expected.low),
            ("objects_high", expected.high),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(phase: KubernetesPhase, objects: u64, shares: [f64; 5]) -> KubernetesPlan {
        let shares = [shares[0], shares[1], shares[2], shares[3], shares[4], 0.0];
        KubernetesPlan {
            phase,
            prefix: "/registry/pods/".into(),
            count: objects,
            namespaces: 3,
            page_size: 500,
            first: 0,
            mix: Verb::ALL
                .into_iter()
                .zip(shares)
                .map(|(verb, share)| (verb.name().to_owned(), share))
                .collect(),
            compaction: None,
            informers: 0,
            events: EventsPlan {
                prefix: "/registry/events/".into(),
                ttl_s: 3600,
                reuse: std::time::Duration::from_secs(60),
                max_per_lease: 1000,
            },
        }
    }

    /// A table that found `n` objects (numbers 0..n) at revision n.
    fn found(objects: &Objects, n: u64) {
        let task = objects.draw_list();
        for object in 0..n {
            objects.saw_object(object, task.tick, n as i64, Some(object as i64 + 1));
        }
    }

    #[test]
    fn names_are_the_apiservers_and_read_back() {
        let objects = Objects::new(&plan(KubernetesPhase::Run, 10, [0.2; 5]), 1).unwrap();
        let mut key = Vec::new();
        objects.key_into(42, &mut key);
        assert_eq!(key, b"/registry/pods/ns-0/obj-0000000042");
        assert_eq!(objects.number_of(&key), Some(42));
        assert_eq!(objects.number_of(b"/registry/pods/ns-0/other"), None);
        assert_eq!(objects.number_of(b"/registry/nodes/ns-0/obj-1"), None);
        let (from, end) = objects.range();
        assert_eq!(
            (from.as_slice(), end.as_slice()),
            (&b"/registry/pods/"[..], &b"/registry/pods0"[..])
        );
    }

    #[test]
    fn the_shares_are_named_and_add_up_to_one() {
        let mix = |pairs: &[(&str, f64)]| -> Vec<(String, f64)> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
        };
        let good = [
            ("get", 0.2),
            ("list", 0.0),
            ("create", 0.1),
            ("update", 0.6),
            ("delete", 0.1),
            ("event", 0.0),
        ];
        assert!(Shares::from_plan(&mix(&good)).is_ok());
        let error = Shares::from_plan(&mix(&good[..5])).unwrap_err().0;
        assert!(error.contains("is missing \"event\""), "{error}");
        let mut odd = good.to_vec();
        odd.push(("watch", 0.0));
        assert!(
            Shares::from_plan(&mix(&odd))
                .unwrap_err()
                .0
                .contains("unknown key \"watch\"")
        );
        let mut short = good.to_vec();
        short[3].1 = 0.5;
        assert!(
            Shares::from_plan(&mix(&short))
                .unwrap_err()
                .0
                .contains("add up to 1")
        );
        let shares = Shares::from_plan(&mix(&good)).unwrap();
        assert_eq!(shares.draw(0.0), Verb::Get);
        assert_eq!(shares.draw(0.25), Verb::Create);
        assert_eq!(shares.draw(0.999_999_999_999), Verb::Delete);
    }

    #[test]
    fn the_count_stays_between_half_and_one_and_a_half_times() {
        // Only creates: past 15 objects every create is skipped.
        let objects = Objects::new(
            &plan(KubernetesPhase::Run, 10, [0.0, 0.0, 1.0, 0.0, 0.0]),
            7,
        )
        .unwrap();
        found(&objects, 15);
        let task = objects.draw(1);
        assert_eq!(task.verb, Verb::Update);
        assert!(task.object < 15 && task.expected == task.object as i64 + 1);
        // Only deletes: at 5 objects every delete is skipped.
        let objects = Objects::new(
            &plan(KubernetesPhase::Run, 10, [0.0, 0.0, 0.0, 0.0, 1.0]),
            7,
        )
        .unwrap();
        found(&objects, 5);
        assert_eq!(objects.draw(1).verb, Verb::Update);
        found(&objects, 6);
        assert_eq!(objects.draw(2).verb, Verb::Delete);
        let counters: HashMap<_, _> = objects.counters().into_iter().collect();
        assert_eq!(counters["delete_skipped"], 1);
    }

    #[test]
    fn creates_name_new_objects_and_the_table_follows_what_it_sees() {
        let objects =
            Objects::new(&plan(KubernetesPhase::Run, 4, [0.0, 0.0, 1.0, 0.0, 0.0]), 3).unwrap();
        found(&objects, 4);
        let create = objects.draw(1);
        assert_eq!((create.verb, create.object), (Verb::Create, 4));
        objects.saw(&create, 10, Some(10));
        assert_eq!(objects.expected(), Expected { low: 5, high: 5 });
        // A delete seen at 12, then a get's older reply (at 11): still gone.
        objects.saw(&create, 12, None);
        objects.saw(&create, 11, Some(10));
        assert_eq!(objects.expected(), Expected { low: 4, high: 4 });
        // Every present object can still be drawn after the swap-remove.
        let seen: std::collections::HashSet<u64> = (0..200)
            .map(|r| Objects::draw(&objects, r))
            .filter(|t| t.verb != Verb::Create)
            .map(|t| t.object)
            .collect();
        assert!(seen.is_subset(&(0..4).collect()));
    }

    #[test]
    fn a_failed_write_is_doubt_until_something_later_sees_the_object() {
        let objects =
            Objects::new(&plan(KubernetesPhase::Run, 4, [0.0, 0.0, 1.0, 0.0, 0.0]), 3).unwrap();
        found(&objects, 4);
        let create = objects.draw(1);
        objects.failed(&create);
        assert_eq!(objects.expected(), Expected { low: 4, high: 5 });
        // Something drawn before the failure settles nothing.
        objects.saw(&create, 20, None);
        assert_eq!(objects.expected(), Expected { low: 4, high: 5 });
        let later = Task {
            tick: objects.tick(),
            ..create
        };
        objects.saw(&later, 21, Some(19));
        assert_eq!(objects.expected(), Expected { low: 5, high: 5 });
    }

    #[test]
    fn the_audit_names_objects_lost_and_unexpected_but_not_doubted_ones() {
        let objects =
            Objects::new(&plan(KubernetesPhase::Run, 4, [0.0, 0.0, 1.0, 0.0, 0.0]), 3).unwrap();
        found(&objects, 4);
        let key = |n: u64| {
            let mut key = Vec::new();
            objects.key_into(n, &mut key);
            key
        };
        let all: Vec<Vec<u8>> = (0..4).map(key).collect();
        fn keys(listed: &[Vec<u8>]) -> Vec<&[u8]> {
            listed.iter().map(Vec::as_slice).collect()
        }
        assert_eq!(objects.audit(keys(&all)), Audit::default());
        // Object 2 missing, a stranger (9) and a key of no object listed.
        let mut wrong: Vec<Vec<u8>> = vec![key(0), key(1), key(3), key(9)];
        wrong.push(b"/registry/pods/ns-0/not-an-object".to_vec());
        let audit = objects.audit(keys(&wrong));
        assert_eq!((audit.lost, audit.unexpected), (1, 2));
        // A create of unknown outcome (object 4) may be there or not.
        let create = objects.draw(1);
        objects.failed(&create);
        let with_it: Vec<Vec<u8>> = (0..5).map(key).collect();
        assert_eq!(objects.audit(keys(&with_it)), Audit::default());
        assert_eq!(objects.audit(keys(&all)), Audit::default());
    }

    #[test]
    fn the_load_phase_creates_numbers_in_order_and_a_read_gets_first() {
        let mut p = plan(KubernetesPhase::Load, 4, [0.2; 5]);
        p.first = 7;
        let objects = Objects::new(&p, 3).unwrap();
        assert_eq!(
            (objects.draw(2).verb, objects.draw(2).object),
            (Verb::Create, 9)
        );
        p.phase = KubernetesPhase::Read;
        let objects = Objects::new(&p, 3).unwrap();
        assert_eq!(
            (objects.draw(5).verb, objects.draw(5).object),
            (Verb::Get, 7)
        );
    }

    #[test]
    fn a_lease_is_reused_until_it_is_old_or_full_as_the_apiservers() {
        let plan = EventsPlan {
            prefix: "/registry/events/".into(),
            ttl_s: 30,
            reuse: std::time::Duration::from_secs(10),
            max_per_lease: 3,
        };
        assert_eq!(lease_ttl_s(&plan), 40);
        let start = Instant::now();
        let mut book = LeaseBook::default();
        assert_eq!(book.take(start, &plan), None, "none granted yet");
        book.granted(7, start);
        assert_eq!(book.take(start, &plan), Some(7));
        assert_eq!(book.take(start, &plan), Some(7));
        assert_eq!(book.take(start, &plan), None, "three events on it: full");
        book.granted(8, start);
        let later = start + std::time::Duration::from_secs(10);
        assert_eq!(book.take(later, &plan), None, "ten seconds old: too old");
    }

    #[test]
    fn events_are_named_apart_and_never_again() {
        let mut p = plan(KubernetesPhase::Run, 10, [0.0; 5]);
        p.mix = Verb::ALL
            .into_iter()
            .map(|verb| (verb.name().to_owned(), f64::from(verb == Verb::Event)))
            .collect();
        let objects = Objects::new(&p, 1).unwrap();
        assert!(objects.creates_events());
        let (a, b) = (objects.draw(0), objects.draw(1));
        assert_eq!((a.verb, b.verb), (Verb::Event, Verb::Event));
        assert_ne!(a.object, b.object);
        let mut key = Vec::new();
        objects.event_key_into(b.object, &mut key);
        assert_eq!(key, b"/registry/events/ns-1/ev-0000000001");
        let (from, end) = objects.events_range();
        assert!(key.as_slice() >= from.as_slice() && key.as_slice() < end.as_slice());
        // the objects' table is not touched: they stay countable apart
        assert_eq!(objects.expected().high, 0);
        objects.expired(3, objects.origin() + std::time::Duration::from_millis(2500));
        objects.expired(1, objects.origin());
        assert_eq!(objects.expirations(), vec![1, 0, 3]);
    }
}
