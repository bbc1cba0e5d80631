//! A folio's trips between tiers: a promotion linked to the demotion that
//! moves the same folio back (ping-pong, with its residency time on the
//! top tier), and a demoted folio linked to its next promotion.
//!
//! A folio is followed by its identity, which migration copies to the new
//! folio in both directions: (`mapping`, `index`), the anon_vma or file and
//! the page offset in it. A PFN freed and reused by another folio carries
//! another identity, so it never links to the folio that held it before.
//! A virtual page whose folio was freed and faulted in again keeps its
//! identity: that is the same page of the same process coming back.
//!
//! Each move also names the PFNs: a promotion the one the migration
//! allocated on the top tier (`FaultEvent::dst_pfn`), a demotion the one it
//! leaves (`src_pfn`) and the one it fills below (`dst_pfn`), a hint fault
//! the one it faults on (`src_pfn`). With the top tier's spans known, a
//! promotion whose new PFN is known waits for its demotion at that PFN
//! ([`dram`]: an array `--map-budget` bounds), and the demotion leaving
//! that PFN ends it if it is of the same identity; the other promotions
//! (`promote`'s moves, kernels without the hook, older traces) wait in the
//! table of identities. A demoted folio waits there for its next promotion,
//! whose fault is checked against the PFN the demotion filled
//! ([`PfnLinks`]).
//!
//! The table of identities is bounded ([`MAX_FOLLOWED`]); when it fills,
//! folios are followed 1 in 2, then 1 in 4 and so on, chosen by a hash of
//! their identity, so a followed folio stays followed, and each move of a
//! followed folio counts for as many folios as the rate follows it out of:
//! the counts stay unbiased estimates, and the report states the rate and
//! the error (see [`crate::sampling`]).
use std::collections::{BTreeMap, HashMap};

use numa_ebpf_common::{reclaimer, DemoteEvent, FaultEvent};
use serde::{Deserialize, Serialize};

use super::funnel::{promoted_folio, slow_tier};
use super::log2::{BucketCount, Log2Hist};
use crate::{mapplan::DEFAULT_MAP_BUDGET, params::KernelParams};

mod dram;
pub use dram::DramReport;
use dram::{DramTable, Found};

/// A promotion demoted again within this long is a ping-pong.
pub const PINGPONG_WINDOW_NS: u64 = 600_000_000_000;
/// Folios followed at once (about 64 bytes each); see [`Lifecycle::make_room`].
pub const MAX_FOLLOWED: usize = 1 << 18;
/// The sampling rate's bound, 1 in 2^40 folios (4 PiB of base pages): past
/// it, the table is emptied instead.
const MAX_SHIFT: u32 = 40;
/// Promoting processes followed apart (about 600 bytes each); the others
/// are summed.
pub const MAX_PROCESSES: usize = 4096;
/// The base page: a ping-pong's pages moved twice for nothing are
/// `pingpong_pages` of these, each way.
pub const PAGE_BYTES: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Trip {
    /// When it last moved, and which way.
    moved_ns: u64,
    promoted: bool,
    /// Promoted at least once before its last move.
    was_promoted: bool,
    /// Demoted, and it has taken a hint fault since.
    faulted: bool,
    /// The promoting process of its last promotion, its cgroup, and the
    /// (lower tier, top tier) nodes it was promoted between.
    tgid: u32,
    cgroup_id: u64,
    nodes: (i32, i32),
    /// The caller's note on its last promotion (the shadow: which models
    /// would have made it).
    tag: u64,
    /// Where its last move placed it (0: not known).
    pfn: u64,
}

/// How the moves were linked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PfnLinks {
    /// Demotions of promoted folios linked to their promotion by the PFN it
    /// allocated (the top tier's table), and by identity alone (the
    /// promotions whose new PFN was not known, or in the table of
    /// identities when the top tier's spans are not).
    pub down_by_pfn: u64,
    pub down_by_identity: u64,
    /// Of those by identity, the ones where both PFNs were known; of
    /// those, the demotion left the PFN the promotion allocated.
    pub down_checked: u64,
    pub down_same: u64,
    /// Demotions from a PFN where a followed promotion of another folio
    /// waited: the PFN was freed and reused, so no link.
    pub down_reused: u64,
    /// Demoted folios' first hint faults after their demotion, where both
    /// PFNs were known; of those, the fault was on the PFN the demotion
    /// filled.
    pub up_checked: u64,
    pub up_same: u64,
}

impl PfnLinks {
    fn check(checked: &mut u64, same: &mut u64, placed: u64, seen: u64, w: u64) {
        if placed != 0 && seen != 0 {
            *checked += w;
            *same += w * u64::from(placed == seen);
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct Lifecycle {
    folios: HashMap<(u64, u64), Trip>,
    /// Every trip, whatever its keys.
    all: Trips,
    /// Demoted folios promoted again.
    returned: u64,
    /// Folios are followed 1 in 2^`shift`, by [`identity_hash`].
    shift: u32,
    /// Trips by the promoting fault's process, its cgroup and the nodes
    /// it promoted between; past their bounds, summed.
    by_process: BTreeMap<u32, Trips>,
    other_processes: Trips,
    by_nodes: BTreeMap<(i32, i32), Trips>,
    other_nodes: Trips,
    by_cgroup: BTreeMap<u64, Trips>,
    other_cgroups: Trips,
    forgotten: u64,
    /// Demoted folios that took a hint fault again.
    refaulted: u64,
    pfn_links: PfnLinks,
    /// The top tier's promotions by PFN, when its spans are known.
    dram: Option<DramTable>,
}

/// What one key's promotions (a process's, a cgroup's, a node pair's) of
/// folios whose identity was read became.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Trips {
    pub promotions: u64,
    /// Of those, folios it had promoted before that were demoted since.
    pub repromotions: u64,
    /// Demotions of the folios it promoted, any time after, by
    /// [`reclaimer`].
    pub demoted: [u64; reclaimer::NAMES.len()],
    /// Of those, within the window, and their pages.
    pub pingpong: u64,
    pub pingpong_pages: u64,
    /// Time on the top tier of each of its ping-pongs, ns.
    pub residency_ns: Log2Hist,
    /// Its latest promotion or demotion (event time).
    pub(crate) last_ns: u64,
}

impl Trips {
    /// A promotion at `now_ns` counting for `w` folios, and for `again`
    /// re-promotions (of a folio it had promoted before and that was
    /// demoted since).
    pub fn promoted(&mut self, now_ns: u64, w: u64, again: u64) {
        self.promotions += w;
        self.repromotions += again;
        self.last_ns = self.last_ns.max(now_ns);
    }

    /// A demotion by `who` (a [`reclaimer`] value), counting for `w`
    /// folios, of a folio it promoted at `now_ns`; a ping-pong when
    /// `resident_ns` on the top tier is within the window.
    fn demoted(&mut self, who: u32, pages: u32, resident_ns: Option<u64>, now_ns: u64, w: u64) {
        if let Some(n) = self.demoted.get_mut(who as usize) {
            *n += w;
        }
        if let Some(resident) = resident_ns {
            self.pingpong += w;
            self.pingpong_pages += w * u64::from(pages);
            self.residency_ns.add_n(resident, w);
        }
        self.last_ns = self.last_ns.max(now_ns);
    }

    /// Adds `other`'s counts (a key folded into the others).
    fn merge(&mut self, other: &Trips) {
        self.promotions += other.promotions;
        self.repromotions += other.repromotions;
        for (n, o) in self.demoted.iter_mut().zip(other.demoted) {
            *n += o;
        }
        self.pingpong += other.pingpong;
        self.pingpong_pages += other.pingpong_pages;
        self.residency_ns.merge(&other.residency_ns);
        self.last_ns = self.last_ns.max(other.last_ns);
    }

    /// The median time on the top tier of its ping-pongs, ms (a log2
    /// bucket's upper bound).
    pub fn residency_p50_ms(&self) -> Option<u64> {
        self.residency_ns.quantile(0.5).map(|ns| ns / 1_000_000)
    }
}

/// `key`'s trips in `map`, which holds at most `max` keys: past them the
/// least recently active key's trips are added to `other`, so new keys
/// (days of churn) are still followed apart.
fn trips_mut<'a, K: Ord + Copy>(
    map: &'a mut BTreeMap<K, Trips>,
    other: &mut Trips,
    key: K,
    max: usize,
) -> &'a mut Trips {
    if map.len() >= max && !map.contains_key(&key) {
        let idle = map.iter().min_by_key(|(_, t)| t.last_ns).map(|(&k, _)| k);
        if let Some(t) = idle.and_then(|k| map.remove(&k)) {
            other.merge(&t);
        }
    }
    map.entry(key).or_default()
}

/// Whether a folio of identity `key` is followed at 1 in 2^`shift`: the
/// hash's top `shift` bits are zero, so a folio followed at a rate is
/// followed at every rate before it.
fn followed_at(key: (u64, u64), shift: u32) -> bool {
    shift == 0 || identity_hash(key) >> (64 - shift) == 0
}

/// A uniform 64-bit hash of a folio's identity (the splitmix64 finalizer
/// over both halves).
fn identity_hash((mapping, index): (u64, u64)) -> u64 {
    crate::rng::splitmix64(mapping ^ crate::rng::splitmix64(index))
}

/// A promotion undone: the demotion that ended a trip on the top tier
/// within the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingPong {
    /// The process whose hint fault promoted it, and its cgroup.
    pub tgid: u32,
    pub cgroup_id: u64,
    /// The note the promotion was given ([`Lifecycle::fault_tagged`]).
    pub tag: u64,
    pub resident_ns: u64,
    pub pages: u32,
    /// Folios it counts for: the sampling rate when the table is full
    /// ([`MAX_FOLLOWED`]), 1 otherwise.
    pub weight: u64,
}

impl Lifecycle {
    /// A lifecycle that links promotions by PFN on the top tier of
    /// `params` (see [`dram`]), its table bounded by `map_budget` bytes
    /// (`--map-budget`); by identity alone without `params`.
    pub fn new(params: Option<&KernelParams>, map_budget: u64) -> Lifecycle {
        Lifecycle {
            dram: params.and_then(|k| DramTable::new(&k.pfn_spans, k.toptier_mask, map_budget)),
            ..Lifecycle::default()
        }
    }

    /// [`new`](Self::new) with the budget of a trace's map plan (the
    /// default for a trace without one).
    pub fn for_trace(
        params: Option<&KernelParams>,
        map_plan: Option<&crate::mapplan::MapPlan>,
    ) -> Lifecycle {
        Lifecycle::new(
            params,
            map_plan.map_or(DEFAULT_MAP_BUDGET, |p| p.budget_bytes),
        )
    }

    /// Links promotions by PFN on the top tier of a trace's (or the live
    /// probes') header, once: a lifecycle that has a top tier, or has seen
    /// a promotion, keeps what it has.
    pub fn set_top_tier(&mut self, h: &crate::trace::Header) {
        if self.dram.is_none() && self.all.promotions == 0 {
            self.dram = Lifecycle::for_trace(h.params.as_ref(), h.map_plan.as_ref()).dram;
        }
    }

    /// A hint fault: a promotion starts a trip on the top tier. Whether
    /// it did (a promotion of a folio whose identity was read).
    pub fn fault(&mut self, f: &FaultEvent, toptier_mask: u64) -> bool {
        self.fault_tagged(f, toptier_mask, 0)
    }

    /// [`fault`](Self::fault), with a note the ping-pong that may end the
    /// trip hands back.
    pub fn fault_tagged(&mut self, f: &FaultEvent, toptier_mask: u64, tag: u64) -> bool {
        self.demoted_faulted(f, toptier_mask);
        if !promoted_folio(f, toptier_mask) {
            return false;
        }
        self.promoted(f, tag)
    }

    /// A promotion of the folio `f` faulted on, made by the kernel or
    /// (`promote`'s move_pages) on its behalf: a trip on the top tier
    /// starts, noted `tag`. Whether it did (the folio's identity was read).
    pub fn promoted(&mut self, f: &FaultEvent, tag: u64) -> bool {
        let key = (f.mapping, f.index);
        if f.mapping == 0 {
            return false;
        }
        let by_pfn = f.dst_pfn != 0 && self.dram.is_some();
        if !by_pfn && !self.follows(key) {
            return false;
        }
        // The folio's record below (its demotion), which this promotion
        // ends; a folio the table of identities does not follow has none.
        let was = if !self.follows(key) {
            None
        } else if by_pfn {
            self.folios.remove(&key)
        } else {
            self.folios.get(&key).copied()
        };
        let w_identity = self.sampled_one_in();
        let returned = was.filter(|t| !t.promoted);
        self.returned += w_identity * u64::from(returned.is_some());
        let again = w_identity * u64::from(returned.is_some_and(|t| t.was_promoted));
        let trip = Trip {
            moved_ns: f.ts_ns,
            promoted: true,
            was_promoted: was.is_some_and(|t| t.promoted || t.was_promoted),
            faulted: false,
            tgid: f.tgid(),
            cgroup_id: f.cgroup_id,
            nodes: (f.src_nid, f.dst_nid),
            tag,
            pfn: f.dst_pfn,
        };
        // By PFN every promotion is seen; by identity, one in the rate.
        let w = if by_pfn { 1 } else { w_identity };
        self.each_key(&trip, |t| t.promoted(f.ts_ns, w, again));
        if let Some(dram) = self.dram.as_mut().filter(|_| by_pfn) {
            dram.promoted(f.dst_pfn, key, trip);
            return true;
        }
        self.make_room();
        if self.follows(key) {
            self.folios.insert(key, trip);
        }
        true
    }

    /// A slow-tier hint fault `f`: the first since its folio's demotion
    /// links the two, checked against the PFN the demotion filled.
    fn demoted_faulted(&mut self, f: &FaultEvent, toptier_mask: u64) {
        let key = (f.mapping, f.index);
        if f.mapping == 0 || !slow_tier(f.src_nid, toptier_mask) || !self.follows(key) {
            return;
        }
        let w = self.sampled_one_in();
        let Some(t) = self.folios.get_mut(&key) else {
            return;
        };
        if t.promoted || t.faulted {
            return;
        }
        t.faulted = true;
        self.refaulted += w;
        let l = &mut self.pfn_links;
        PfnLinks::check(&mut l.up_checked, &mut l.up_same, t.pfn, f.src_pfn, w);
    }

    /// Whether the folio of identity `key` is followed at today's rate.
    fn follows(&self, key: (u64, u64)) -> bool {
        followed_at(key, self.shift)
    }

    /// Applies `f` to all trips and to those of `trip`'s process, cgroup
    /// and nodes.
    fn each_key(&mut self, trip: &Trip, f: impl Fn(&mut Trips)) {
        f(&mut self.all);
        f(trips_mut(
            &mut self.by_process,
            &mut self.other_processes,
            trip.tgid,
            MAX_PROCESSES,
        ));
        f(trips_mut(
            &mut self.by_cgroup,
            &mut self.other_cgroups,
            trip.cgroup_id,
            super::cgroups::MAX_CGROUPS,
        ));
        f(trips_mut(
            &mut self.by_nodes,
            &mut self.other_nodes,
            trip.nodes,
            super::demotions::MAX_NODE_PAIRS,
        ));
    }

    /// A demotion: ends a trip on the top tier if it began with a
    /// promotion; the ping-pong when that was within the window.
    pub fn demote(&mut self, d: &DemoteEvent) -> Option<PingPong> {
        let key = (d.mapping, d.index);
        if d.mapping == 0 || d.dst_nid < 0 {
            return None;
        }
        let (was, w) = self.promotion_ended(d, key);
        let mut pingpong = None;
        if let Some(t) = was.filter(|t| t.promoted) {
            let resident = d.ts_ns.saturating_sub(t.moved_ns);
            let within = (resident <= PINGPONG_WINDOW_NS).then_some(resident);
            self.each_key(&t, |k| {
                k.demoted(d.reclaimer, d.nr_pages, within, d.ts_ns, w);
            });
            if within.is_some() {
                pingpong = Some(PingPong {
                    tgid: t.tgid,
                    cgroup_id: t.cgroup_id,
                    tag: t.tag,
                    resident_ns: resident,
                    pages: d.nr_pages,
                    weight: w,
                });
            }
        }
        self.make_room();
        if !self.follows(key) {
            return pingpong;
        }
        self.folios.insert(
            key,
            Trip {
                moved_ns: d.ts_ns,
                promoted: false,
                was_promoted: was.is_some_and(|t| t.promoted || t.was_promoted),
                faulted: false,
                tgid: was.map_or(0, |t| t.tgid),
                cgroup_id: was.map_or(0, |t| t.cgroup_id),
                nodes: was.map_or((0, 0), |t| t.nodes),
                tag: 0,
                pfn: d.dst_pfn,
            },
        );
        pingpong
    }

    /// The record of folio `key` that demotion `d` ends, and the folios it
    /// counts for: the promotion waiting at the PFN `d` leaves, else the
    /// folio's record in the table of identities.
    fn promotion_ended(&mut self, d: &DemoteEvent, key: (u64, u64)) -> (Option<Trip>, u64) {
        let found = self
            .dram
            .as_mut()
            .map(|t| (t.demoted(d.src_pfn, key), t.rate()));
        let l = &mut self.pfn_links;
        match found {
            Some((Found::Promoted(t), rate)) => {
                l.down_by_pfn += rate;
                return (Some(t), rate);
            }
            Some((Found::Other, rate)) => l.down_reused += rate,
            _ => {}
        }
        if !self.follows(key) {
            return (None, 0);
        }
        let w = self.sampled_one_in();
        let was = self.folios.get(&key).copied();
        if let Some(t) = was.filter(|t| t.promoted) {
            let l = &mut self.pfn_links;
            l.down_by_identity += w;
            PfnLinks::check(&mut l.down_checked, &mut l.down_same, t.pfn, d.src_pfn, w);
        }
        (was, w)
    }

    /// The trips of the promoting faults' cgroup `id`, when it promoted
    /// anything.
    pub fn cgroup(&self, id: u64) -> Option<&Trips> {
        self.by_cgroup.get(&id)
    }

    /// Process `tgid`'s trips, when it promoted anything.
    pub fn process(&self, tgid: u32) -> Option<&Trips> {
        self.by_process.get(&tgid)
    }

    /// Keeps the table under [`MAX_FOLLOWED`]: when full, halves the rate
    /// folios are followed at until at most three quarters are left (about
    /// half go each time: the hash is uniform), counting those let go in
    /// `forgotten`. A folio let go is not linked again; the followed ones
    /// now count for twice as many, so every count stays an estimate of
    /// all folios' (see the module's note).
    fn make_room(&mut self) {
        if self.folios.len() < MAX_FOLLOWED {
            return;
        }
        let before = self.folios.len();
        while self.folios.len() > MAX_FOLLOWED / 4 * 3 {
            if self.shift == MAX_SHIFT {
                self.folios.clear();
                break;
            }
            self.shift += 1;
            let shift = self.shift;
            self.folios.retain(|&key, _| followed_at(key, shift));
        }
        self.forgotten += (before - self.folios.len()) as u64;
    }

    /// Promotions followed (of folios whose identity was read).
    pub fn promotions(&self) -> u64 {
        self.all.promotions
    }

    /// Ping-pongs: (folios, pages, re-promotions).
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.all.pingpong,
            self.all.pingpong_pages,
            self.all.repromotions,
        )
    }

    /// Folios are followed 1 in this many (1: every one): what a move of
    /// a followed folio counts for.
    pub fn sampled_one_in(&self) -> u64 {
        1 << self.shift
    }

    /// The higher of the two tables' rates: a ping-pong counts for at
    /// most this many.
    pub fn pingpong_sampled_one_in(&self) -> u64 {
        let dram = self.dram.as_ref().map_or(1, DramTable::rate);
        self.sampled_one_in().max(dram)
    }

    /// Time on the top tier of each ping-pong, ns.
    pub fn residency(&self) -> &Log2Hist {
        &self.all.residency_ns
    }

    pub fn report(&self) -> LifecycleReport {
        LifecycleReport {
            window_s: PINGPONG_WINDOW_NS as f64 / 1e9,
            promotions: self.all.promotions,
            pingpong: self.all.pingpong,
            pingpong_pages: self.all.pingpong_pages,
            demoted_after_window: self
                .all
                .demoted
                .iter()
                .sum::<u64>()
                .saturating_sub(self.all.pingpong),
            returned: self.returned,
            repromotions: self.all.repromotions,
            residency_ms: self.all.residency_ns.rows(1e6),
            pingpong_by_process: top_rows(&self.by_process, None)
                .into_iter()
                .filter_map(|(pid, trips)| Some(ProcessPingpong { pid: pid?, trips }))
                .collect(),
            pingpong_by_nodes: top_rows(&self.by_nodes, Some((&self.other_nodes, None)))
                .into_iter()
                .map(|(pair, trips)| NodesPingpong {
                    src: pair.map(|p| p.0),
                    dst: pair.map(|p| p.1),
                    trips,
                })
                .collect(),
            pingpong_by_cgroup: top_rows(
                &self.by_cgroup,
                Some((&self.other_cgroups, Some(super::cgroups::OTHER_CGROUPS))),
            )
            .into_iter()
            .map(|(id, trips)| CgroupPingpong {
                cgroup_id: id.unwrap_or(super::cgroups::OTHER_CGROUPS),
                trips,
            })
            .collect(),
            forgotten: self.forgotten,
            refaulted: self.refaulted,
            sampled_one_in: self.sampled_one_in(),
            pingpong_error: self.pingpong_error(),
            pfn_links: self.pfn_links,
            dram: self.dram.as_ref().map(DramTable::report),
        }
    }

    /// The ping-pong count's error (three standard errors) at the higher
    /// of the two tables' rates: the count over the rate stands for the
    /// folios seen, fewer than were (those seen at a lower rate count for
    /// fewer), so the error stated is at least the true one.
    fn pingpong_error(&self) -> f64 {
        let rate = self.pingpong_sampled_one_in();
        let sampling = crate::sampling::Sampling {
            rate,
            ..Default::default()
        };
        sampling.scale(self.all.pingpong / rate, 1.0).error
    }
}

/// Rows a report shows of a table of trips.
pub const TOP_ROWS: usize = 10;

/// The keys of `map` whose promotions were demoted at all, the most
/// ping-pongs first (then the most demotions), up to [`TOP_ROWS`]; and
/// `other`, the keys past the table's bound, under its own key (summed
/// with that key's row if the table has it) or None.
fn top_rows<K: Ord + Copy>(
    map: &BTreeMap<K, Trips>,
    other: Option<(&Trips, Option<K>)>,
) -> Vec<(Option<K>, TripCounts)> {
    let demoted = |t: &Trips| t.demoted.iter().sum::<u64>();
    let other_key = other.and_then(|(_, k)| k);
    let others = other.map(|(t, key)| {
        let mut sum = t.clone();
        if let Some(same) = key.and_then(|k| map.get(&k)) {
            sum.merge(same);
        }
        sum
    });
    let mut rows: Vec<(Option<K>, &Trips)> = map
        .iter()
        .filter(|(&k, _)| others.is_none() || Some(k) != other_key)
        .map(|(&k, t)| (Some(k), t))
        .chain(others.as_ref().map(|t| (other_key, t)))
        .filter(|(_, t)| demoted(t) > 0)
        .collect();
    rows.sort_by(|a, b| {
        (b.1.pingpong, demoted(b.1))
            .cmp(&(a.1.pingpong, demoted(a.1)))
            .then(a.0.cmp(&b.0))
    });
    rows.truncate(TOP_ROWS);
    rows.into_iter()
        .map(|(k, t)| (k, TripCounts::of(t)))
        .collect()
}

/// One key's trips in a report (a process's, a cgroup's, a node pair's).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct TripCounts {
    /// Its promotions (of folios whose identity was read); of those,
    /// folios it had promoted before, demoted since.
    #[serde(default)]
    pub promotions: u64,
    #[serde(default)]
    pub repromotions: u64,
    /// Demotions of the folios it promoted, by reclaimer (kswapd, direct,
    /// khugepaged).
    #[serde(default)]
    pub demoted_by: BTreeMap<String, u64>,
    /// Of those, within the window: folios, pages, and the bytes moved
    /// for nothing (up and down again: pages of [`PAGE_BYTES`], twice).
    pub pingpong: u64,
    #[serde(default)]
    pub pingpong_pages: u64,
    #[serde(default)]
    pub moved_for_nothing_bytes: u64,
    /// Time on the top tier of each ping-pong, ms (log2 buckets), and its
    /// median (a bucket's upper bound).
    #[serde(default)]
    pub residency_ms: Vec<BucketCount>,
    #[serde(default)]
    pub residency_p50_ms: Option<u64>,
}

impl TripCounts {
    pub fn of(t: &Trips) -> Self {
        TripCounts {
            promotions: t.promotions,
            repromotions: t.repromotions,
            demoted_by: super::demotions::by_reclaimer_name(&t.demoted)
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
            pingpong: t.pingpong,
            pingpong_pages: t.pingpong_pages,
            moved_for_nothing_bytes: t.pingpong_pages.saturating_mul(2 * PAGE_BYTES),
            residency_ms: t.residency_ns.rows(1e6),
            residency_p50_ms: t.residency_p50_ms(),
        }
    }
}

/// Trips between tiers in a report.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleReport {
    /// A promotion demoted again within this many seconds is a ping-pong.
    pub window_s: f64,
    /// Promotions of slow-tier folios whose identity was read.
    pub promotions: u64,
    /// Of those, demoted again within the window (folios, and their pages:
    /// the bytes moved for nothing are `pingpong_pages` times the page
    /// size, twice).
    pub pingpong: u64,
    pub pingpong_pages: u64,
    /// Promoted folios demoted after the window.
    pub demoted_after_window: u64,
    /// Demoted folios that took a hint fault again (counted at the
    /// first), and those promoted again; of those, folios that had been
    /// promoted before their demotion (promoted, demoted, promoted).
    #[serde(default)]
    pub refaulted: u64,
    pub returned: u64,
    pub repromotions: u64,
    /// Time on the top tier of each ping-pong, ms (log2 buckets).
    pub residency_ms: Vec<BucketCount>,
    /// The trips of the promoting processes, of the node pairs the
    /// promotions went between, and of the promoting faults' cgroups (v2
    /// ids): those whose promotions were demoted, the most ping-pongs
    /// first, up to [`TOP_ROWS`] each. The keys past a table's bound are
    /// summed: node pair None, cgroup id 0 (with the faults whose cgroup
    /// was not read).
    pub pingpong_by_process: Vec<ProcessPingpong>,
    #[serde(default)]
    pub pingpong_by_nodes: Vec<NodesPingpong>,
    #[serde(default)]
    pub pingpong_by_cgroup: Vec<CgroupPingpong>,
    /// Folios dropped from the table when it was full: their next move is
    /// not linked (see [`MAX_FOLLOWED`]).
    pub forgotten: u64,
    /// Folios are followed 1 in this many (1: every one) since the table
    /// filled; every count above is then an estimate for all of them, and
    /// `pingpong_error` is the ping-pong count's (three standard errors).
    #[serde(default = "every_folio")]
    pub sampled_one_in: u64,
    #[serde(default)]
    pub pingpong_error: f64,
    /// How the moves above were linked.
    #[serde(default)]
    pub pfn_links: PfnLinks,
    /// The top tier's table of promotions by PFN (None: spans not known,
    /// every link by identity).
    #[serde(default)]
    pub dram: Option<DramReport>,
}

fn every_folio() -> u64 {
    1
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessPingpong {
    pub pid: u32,
    #[serde(flatten)]
    pub trips: TripCounts,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct CgroupPingpong {
    pub cgroup_id: u64,
    #[serde(flatten)]
    pub trips: TripCounts,
}

/// A node pair's trips: promoted from `src` (a lower tier) to `dst`.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodesPingpong {
    pub src: Option<i32>,
    pub dst: Option<i32>,
    #[serde(flatten)]
    pub trips: TripCounts,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::fixtures;
    use numa_ebpf_common::Outcome;

    const S: u64 = 1_000_000_000;
    /// Node 0 is the top tier.
    const TOPTIER: u64 = 1;

    /// Process 42 promoting folio (`mapping`, `index`) from node 1 at `ts_ns`.
    fn promotion(ts_ns: u64, mapping: u64, index: u64) -> FaultEvent {
        let f = fixtures::fault(1, index, 0, Outcome::PromoteHot);
        FaultEvent {
            ts_ns,
            ..fixtures::migrated(f, mapping, index)
        }
    }

    fn demotion(ts_ns: u64, mapping: u64, index: u64, dst_pfn: u64) -> DemoteEvent {
        DemoteEvent {
            dst_pfn,
            ..fixtures::demotion(ts_ns, mapping, index)
        }
    }

    #[test]
    fn a_promotion_demoted_within_the_window_is_a_ping_pong_with_its_residency() {
        let mut l = Lifecycle::default();
        let f = FaultEvent {
            cgroup_id: 9,
            ..promotion(S, 0xa1, 7)
        };
        assert!(l.fault(&f, TOPTIER));
        l.demote(&demotion(13 * S, 0xa1, 7, 5000));
        let r = l.report();
        assert_eq!((r.promotions, r.pingpong, r.pingpong_pages), (1, 1, 1));
        // 12 s on DRAM: the bucket up to 2^34 ns, 17,179.869184 ms.
        assert_eq!(r.residency_ms.len(), 1);
        assert_eq!(r.residency_ms[0].count, 1);
        assert!((r.residency_ms[0].le - 17_179.869_184).abs() < 1e-6);
        let trips = TripCounts {
            promotions: 1,
            repromotions: 0,
            demoted_by: [("kswapd".to_owned(), 1)].into(),
            pingpong: 1,
            pingpong_pages: 1,
            moved_for_nothing_bytes: 2 * PAGE_BYTES,
            residency_ms: r.residency_ms.clone(),
            residency_p50_ms: Some(17_179),
        };
        assert_eq!(
            r.pingpong_by_process,
            vec![ProcessPingpong {
                pid: 42,
                trips: trips.clone()
            }]
        );
        // The pair the promotion went between: node 1 up to node 0.
        assert_eq!(
            r.pingpong_by_nodes,
            vec![NodesPingpong {
                src: Some(1),
                dst: Some(0),
                trips: trips.clone()
            }]
        );
        assert_eq!(
            r.pingpong_by_cgroup,
            vec![CgroupPingpong {
                cgroup_id: 9,
                trips
            }]
        );
    }

    #[test]
    fn each_process_s_demotions_are_counted_by_reclaimer_within_the_window_or_not() {
        let mut l = Lifecycle::default();
        for i in 0..3 {
            l.fault(&promotion(S, 0xa2, i), TOPTIER);
        }
        l.demote(&DemoteEvent {
            reclaimer: reclaimer::DIRECT,
            nr_pages: 512,
            ..demotion(2 * S, 0xa2, 0, 1)
        });
        l.demote(&demotion(3 * S, 0xa2, 1, 2));
        l.demote(&demotion(S + PINGPONG_WINDOW_NS + 1, 0xa2, 2, 3));
        let r = l.report();
        let t = &r.pingpong_by_process[0].trips;
        assert_eq!(
            t.demoted_by,
            [("direct".to_owned(), 1), ("kswapd".to_owned(), 2)].into()
        );
        assert_eq!((t.promotions, t.pingpong, t.pingpong_pages), (3, 2, 513));
        assert_eq!(t.moved_for_nothing_bytes, 513 * 2 * 4096);
        assert_eq!(t.residency_ms.iter().map(|b| b.count).sum::<u64>(), 2);
    }

    #[test]
    fn cgroups_past_the_bound_share_the_row_of_cgroup_id_0() {
        let mut l = Lifecycle::default();
        // Id 0 (faults whose cgroup was not read) comes last: the table is
        // full, and cgroup 1, the least recently active, is summed.
        let max = super::super::cgroups::MAX_CGROUPS as u64;
        for id in (1..=max).chain([0]) {
            let f = FaultEvent {
                cgroup_id: id,
                ..promotion(S + id, 0xa3, id)
            };
            l.fault(&f, TOPTIER);
            l.demote(&demotion(2 * S + id, 0xa3, id, id));
        }
        let rows = l.report().pingpong_by_cgroup;
        let zero: Vec<_> = rows.iter().filter(|r| r.cgroup_id == 0).collect();
        assert_eq!(zero.len(), 1, "one row for id 0 and the others");
        assert_eq!(
            zero[0].trips.pingpong, 2,
            "id 0's own and the one pushed out"
        );
        assert!(rows.len() <= TOP_ROWS);
    }

    #[test]
    fn a_pfn_reused_by_another_folio_is_not_a_ping_pong() {
        // The promoted folio was freed and its DRAM PFN went to a folio of
        // another anon_vma, which reclaim demotes: the same PFN, another
        // identity (mapping, index), so no link.
        let mut l = Lifecycle::default();
        l.fault(&promotion(S, 0xa1, 7), TOPTIER);
        l.demote(&demotion(2 * S, 0xb1, 7, 5000));
        l.demote(&demotion(3 * S, 0xa1, 8, 5000));
        assert_eq!(l.report().pingpong, 0);
    }

    #[test]
    fn each_link_is_checked_against_the_pfns_both_moves_name() {
        let mut l = Lifecycle::default();
        // Promoted to PFN 9007, demoted from it to 5000, faulted there and
        // promoted again.
        l.fault(&promotion(S, 0xa1, 7), TOPTIER);
        l.demote(&demotion(2 * S, 0xa1, 7, 5000));
        let back = FaultEvent {
            src_pfn: 5000,
            ..promotion(3 * S, 0xa1, 7)
        };
        l.fault(&back, TOPTIER);
        // Moved on the top tier meanwhile: demoted from another PFN.
        l.demote(&DemoteEvent {
            src_pfn: 9999,
            ..demotion(4 * S, 0xa1, 7, 6000)
        });
        // A promotion whose new PFN is not known is not checked.
        l.fault(
            &FaultEvent {
                dst_pfn: 0,
                ..promotion(5 * S, 0xa1, 7)
            },
            TOPTIER,
        );
        l.demote(&demotion(6 * S, 0xa1, 7, 7000));
        let r = l.report();
        assert_eq!(r.pingpong, 3);
        assert_eq!(
            r.pfn_links,
            PfnLinks {
                down_by_identity: 3,
                down_checked: 2,
                down_same: 1,
                up_checked: 2,
                up_same: 1,
                ..PfnLinks::default()
            }
        );
    }

    /// A lifecycle whose top tier is node 0's 2^16 PFNs (node 1 above them).
    fn with_top_tier() -> Lifecycle {
        let span = |node, start, end| crate::mapplan::PfnSpan { node, start, end };
        let params = KernelParams {
            toptier_mask: TOPTIER,
            pfn_spans: vec![span(0, 0, 1 << 16), span(1, 1 << 16, 1 << 17)],
            ..KernelParams::default()
        };
        Lifecycle::new(Some(&params), 64 << 20)
    }

    #[test]
    fn with_the_top_tier_known_a_promotion_waits_at_its_pfn() {
        let mut l = with_top_tier();
        // Promoted to PFN 9007, demoted from it: linked by PFN.
        l.fault(&promotion(S, 0xa1, 7), TOPTIER);
        assert!(l.demote(&demotion(2 * S, 0xa1, 7, 5000)).is_some());
        // Promoted to 9008, which another folio holds when reclaim
        // demotes it: the PFN was reused, no link.
        l.fault(&promotion(3 * S, 0xa1, 8), TOPTIER);
        assert!(l.demote(&demotion(4 * S, 0xb1, 8, 5001)).is_none());
        // A promotion whose new PFN is not known (the promoter's move)
        // waits by identity.
        let moved = FaultEvent {
            dst_pfn: 0,
            ..promotion(5 * S, 0xa1, 9)
        };
        assert!(l.promoted(&moved, 0));
        assert!(l.demote(&demotion(6 * S, 0xa1, 9, 5002)).is_some());
        // Demoted to 5000 and faulted there, refused, then promoted.
        let refused = FaultEvent {
            src_pfn: 5000,
            migrate_ok: 0,
            ..promotion(7 * S, 0xa1, 7)
        };
        assert!(!l.fault(&refused, TOPTIER));
        l.fault(
            &FaultEvent {
                src_pfn: 5000,
                ..promotion(8 * S, 0xa1, 7)
            },
            TOPTIER,
        );
        let r = l.report();
        assert_eq!(
            (r.promotions, r.pingpong, r.returned, r.repromotions),
            (4, 2, 1, 1)
        );
        assert_eq!(r.refaulted, 1, "the first fault after the demotion");
        assert_eq!(
            r.pfn_links,
            PfnLinks {
                down_by_pfn: 1,
                down_by_identity: 1,
                down_reused: 1,
                up_checked: 1,
                up_same: 1,
                ..PfnLinks::default()
            }
        );
        let dram = r.dram.expect("a top-tier table");
        assert_eq!((dram.rate, dram.top_pfns), (1, 1 << 16));
        assert!(dram.bytes > 0 && dram.bytes <= dram.budget_bytes);
    }

    #[test]
    fn promoted_demoted_and_promoted_again_is_a_re_promotion() {
        let mut l = Lifecycle::default();
        l.demote(&demotion(S, 0xc1, 1, 1));
        l.fault(&promotion(2 * S, 0xc1, 1), TOPTIER);
        l.demote(&demotion(3 * S, 0xc1, 1, 2));
        l.fault(&promotion(4 * S, 0xc1, 1), TOPTIER);
        let r = l.report();
        assert_eq!((r.promotions, r.pingpong), (2, 1));
        // Both promotions brought a demoted folio back; only the second had
        // been promoted before.
        assert_eq!((r.returned, r.repromotions), (2, 1));
        let t = &r.pingpong_by_process[0].trips;
        assert_eq!((t.promotions, t.repromotions), (2, 1));
    }

    #[test]
    fn a_demotion_after_the_window_is_not_a_ping_pong() {
        let mut l = Lifecycle::default();
        l.fault(&promotion(S, 0xd1, 3), TOPTIER);
        l.demote(&demotion(S + PINGPONG_WINDOW_NS + 1, 0xd1, 3, 9));
        let r = l.report();
        assert_eq!((r.pingpong, r.demoted_after_window), (0, 1));
    }

    #[test]
    fn failed_and_top_tier_migrations_start_no_trip() {
        let mut l = Lifecycle::default();
        let failed = FaultEvent {
            migrate_ok: 0,
            ..promotion(S, 0xe1, 1)
        };
        let dram_to_dram = FaultEvent {
            src_nid: 0,
            ..promotion(S, 0xe1, 2)
        };
        l.fault(&failed, TOPTIER);
        l.fault(&dram_to_dram, TOPTIER);
        l.demote(&demotion(2 * S, 0xe1, 1, 1));
        l.demote(&demotion(2 * S, 0xe1, 2, 2));
        let r = l.report();
        assert_eq!((r.promotions, r.pingpong), (0, 0));
    }

    #[test]
    fn a_full_table_follows_half_the_folios_and_counts_each_for_two() {
        let mut l = Lifecycle::default();
        // The table full, and one more.
        for i in 0..=MAX_FOLLOWED as u64 {
            l.demote(&demotion(S + i, 0xf3, i, i));
        }
        let r = l.report();
        assert_eq!(r.sampled_one_in, 2);
        assert!(l.folios.len() <= MAX_FOLLOWED / 4 * 3);
        assert_eq!(r.forgotten, (MAX_FOLLOWED + 1 - l.folios.len()) as u64);
        // A folio the hash follows counts for two, one it does not for none.
        let key = |followed: bool| {
            (0u64..)
                .map(|i| (0xf2, i))
                .find(|&k| followed_at(k, 1) == followed)
                .expect("the hash splits keys both ways")
        };
        for (k, weight) in [(key(true), Some(2)), (key(false), None)] {
            l.fault(&promotion(2 * S, k.0, k.1), TOPTIER);
            let pp = l.demote(&demotion(3 * S, k.0, k.1, 1));
            assert_eq!(pp.map(|p| p.weight), weight);
        }
        let r = l.report();
        assert_eq!((r.promotions, r.pingpong), (2, 2));
        assert_eq!(r.residency_ms.iter().map(|b| b.count).sum::<u64>(), 2);
    }

    #[test]
    fn sampled_counts_estimate_every_folio_s_within_their_error() {
        // Three times as many folios as the table holds, each promoted and
        // demoted within the window: every one a ping-pong.
        let n = 3 * MAX_FOLLOWED as u64;
        let mut l = Lifecycle::default();
        for i in 0..n {
            l.fault(&promotion(S + i, 0xf5, i), TOPTIER);
        }
        for i in 0..n {
            l.demote(&demotion(2 * S + i, 0xf5, i, i));
        }
        let r = l.report();
        assert!(r.sampled_one_in >= 4, "{}", r.sampled_one_in);
        assert!(l.folios.len() <= MAX_FOLLOWED);
        let off = r.pingpong.abs_diff(n) as f64;
        assert!(
            off <= r.pingpong_error && r.pingpong_error < n as f64 / 10.0,
            "ping-pong {} of {n}, error {}",
            r.pingpong,
            r.pingpong_error
        );
        assert!(r.pingpong <= r.promotions + r.pingpong_error as u64);
    }

    #[test]
    fn processes_past_the_bound_push_out_the_least_recently_active() {
        let mut l = Lifecycle::default();
        for pid in 0..MAX_PROCESSES as u64 + 1 {
            let f = FaultEvent {
                pid_tgid: pid << 32 | pid,
                ..promotion(S + pid, 0xf4, pid)
            };
            l.fault(&f, TOPTIER);
        }
        assert_eq!(l.by_process.len(), MAX_PROCESSES);
        assert!(l.process(0).is_none(), "the least recently active went");
        assert_eq!(
            l.process(MAX_PROCESSES as u32).map(|t| t.promotions),
            Some(1)
        );
        assert_eq!(l.other_processes.promotions, 1, "its counts are kept");
    }

    #[test]
    fn the_table_stays_bounded_and_says_what_it_forgot() {
        let mut l = Lifecycle::default();
        for i in 0..(MAX_FOLLOWED as u64 + 10) {
            l.fault(&promotion(S + i, 0xf1, i), TOPTIER);
        }
        assert!(l.folios.len() <= MAX_FOLLOWED);
        let r = l.report();
        assert_eq!(r.sampled_one_in, 2);
        assert!(r.forgotten >= MAX_FOLLOWED as u64 / 4, "{}", r.forgotten);
        // Every promotion before the table filled, then the followed ones
        // twice.
        assert!(r.promotions >= MAX_FOLLOWED as u64 && r.promotions <= MAX_FOLLOWED as u64 + 20);
    }
}
