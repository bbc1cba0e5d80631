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
use std::collections::{BTreeMap, HashMap};

use numa_ebpf_common::{DemoteEvent, FaultEvent};
use serde::{Deserialize, Serialize};

use super::funnel::promoted_folio;
use super::log2::{BucketCount, Log2Hist};

/// A promotion demoted again within this long is a ping-pong.
pub const PINGPONG_WINDOW_NS: u64 = 600_000_000_000;
/// Folios followed at once (about 64 bytes each); see [`Lifecycle::make_room`].
pub const MAX_FOLLOWED: usize = 1 << 18;
/// Promoting processes followed apart (about 560 bytes each); the others
/// are summed.
pub const MAX_PROCESSES: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Trip {
    /// When it last moved, and which way.
    moved_ns: u64,
    promoted: bool,
    /// Promoted at least once before its last move.
    was_promoted: bool,
    /// The promoting process of its last promotion, and its cgroup.
    tgid: u32,
    cgroup_id: u64,
    /// The caller's note on its last promotion (the shadow: which models
    /// would have made it).
    tag: u64,
}

#[derive(Debug, Default, Clone)]
pub struct Lifecycle {
    folios: HashMap<(u64, u64), Trip>,
    promotions: u64,
    pingpong: u64,
    pingpong_pages: u64,
    demoted_late: u64,
    returned: u64,
    repromotions: u64,
    residency_ns: Log2Hist,
    by_process: BTreeMap<u32, Trips>,
    other_processes: Trips,
    /// Ping-pongs by the demotion's (DRAM, lower tier) nodes, and by the
    /// promoting fault's cgroup; past their bounds, summed.
    by_nodes: BTreeMap<(i32, i32), u64>,
    other_nodes: u64,
    by_cgroup: BTreeMap<u64, Trips>,
    other_cgroups: Trips,
    forgotten: u64,
}

/// One promoting process's trips: its promotions (of folios whose
/// identity was read) and those demoted again within the window.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Trips {
    pub promotions: u64,
    pub pingpong: u64,
    /// Time on the top tier of each of its ping-pongs, ns.
    pub residency_ns: Log2Hist,
    /// Its latest promotion or ping-pong (event time).
    pub(crate) last_ns: u64,
}

impl Trips {
    /// A promotion at `now_ns`.
    pub fn promoted(&mut self, now_ns: u64) {
        self.promotions += 1;
        self.last_ns = self.last_ns.max(now_ns);
    }

    /// A ping-pong ended at `now_ns` after `resident_ns` on the top tier.
    pub fn pingponged(&mut self, resident_ns: u64, now_ns: u64) {
        self.pingpong += 1;
        self.residency_ns.add(resident_ns);
        self.last_ns = self.last_ns.max(now_ns);
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
            other.promotions += t.promotions;
            other.pingpong += t.pingpong;
            other.residency_ns.merge(&t.residency_ns);
        }
    }
    map.entry(key).or_default()
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
}

impl Lifecycle {
    /// A hint fault: a promotion starts a trip on the top tier. Whether
    /// it did (a promotion of a folio whose identity was read).
    pub fn fault(&mut self, f: &FaultEvent, toptier_mask: u64) -> bool {
        self.fault_tagged(f, toptier_mask, 0)
    }

    /// [`fault`](Self::fault), with a note the ping-pong that may end the
    /// trip hands back.
    pub fn fault_tagged(&mut self, f: &FaultEvent, toptier_mask: u64, tag: u64) -> bool {
        if !promoted_folio(f, toptier_mask) {
            return false;
        }
        self.promoted(f, tag)
    }

    /// A promotion of the folio `f` faulted on, made by the kernel or
    /// (`promote`'s move_pages) on its behalf: a trip on the top tier
    /// starts, noted `tag`. Whether it did (the folio's identity was read).
    pub fn promoted(&mut self, f: &FaultEvent, tag: u64) -> bool {
        if f.mapping == 0 {
            return false;
        }
        self.promotions += 1;
        self.process_mut(f.tgid()).promoted(f.ts_ns);
        self.cgroup_mut(f.cgroup_id).promoted(f.ts_ns);
        let key = (f.mapping, f.index);
        let was = self.folios.get(&key).copied();
        if let Some(t) = was.filter(|t| !t.promoted) {
            self.returned += 1;
            self.repromotions += u64::from(t.was_promoted);
        }
        self.make_room(f.ts_ns);
        self.folios.insert(
            key,
            Trip {
                moved_ns: f.ts_ns,
                promoted: true,
                was_promoted: was.is_some_and(|t| t.promoted || t.was_promoted),
                tgid: f.tgid(),
                cgroup_id: f.cgroup_id,
                tag,
            },
        );
        true
    }

    /// A demotion: ends a trip on the top tier if it began with a
    /// promotion; the ping-pong when that was within the window.
    pub fn demote(&mut self, d: &DemoteEvent) -> Option<PingPong> {
        if d.mapping == 0 || d.dst_nid < 0 {
            return None;
        }
        let key = (d.mapping, d.index);
        let was = self.folios.get(&key).copied();
        let mut pingpong = None;
        if let Some(t) = was.filter(|t| t.promoted) {
            let resident = d.ts_ns.saturating_sub(t.moved_ns);
            if resident <= PINGPONG_WINDOW_NS {
                self.pingpong += 1;
                self.pingpong_pages += u64::from(d.nr_pages);
                self.residency_ns.add(resident);
                self.process_mut(t.tgid).pingponged(resident, d.ts_ns);
                super::add_bounded(
                    &mut self.by_nodes,
                    (d.src_nid, d.dst_nid),
                    1,
                    super::demotions::MAX_NODE_PAIRS,
                    &mut self.other_nodes,
                );
                self.cgroup_mut(t.cgroup_id).pingponged(resident, d.ts_ns);
                pingpong = Some(PingPong {
                    tgid: t.tgid,
                    cgroup_id: t.cgroup_id,
                    tag: t.tag,
                    resident_ns: resident,
                    pages: d.nr_pages,
                });
            } else {
                self.demoted_late += 1;
            }
        }
        self.make_room(d.ts_ns);
        self.folios.insert(
            key,
            Trip {
                moved_ns: d.ts_ns,
                promoted: false,
                was_promoted: was.is_some_and(|t| t.promoted || t.was_promoted),
                tgid: was.map_or(0, |t| t.tgid),
                cgroup_id: was.map_or(0, |t| t.cgroup_id),
                tag: 0,
            },
        );
        pingpong
    }

    /// Process `tgid`'s trips. Past [`MAX_PROCESSES`] the least recently
    /// active process's are added to the others', so new processes (days
    /// of process churn) are still followed apart.
    fn process_mut(&mut self, tgid: u32) -> &mut Trips {
        trips_mut(
            &mut self.by_process,
            &mut self.other_processes,
            tgid,
            MAX_PROCESSES,
        )
    }

    /// Cgroup `id`'s trips, bounded as the processes' are.
    fn cgroup_mut(&mut self, id: u64) -> &mut Trips {
        trips_mut(
            &mut self.by_cgroup,
            &mut self.other_cgroups,
            id,
            super::cgroups::MAX_CGROUPS,
        )
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

    /// Keeps the table under [`MAX_FOLLOWED`]: when full, demoted folios
    /// never promoted go (reclaim demotes far more than it promotes; their
    /// next promotion then starts a trip without being counted as
    /// returned), and folios that have not moved within the window (their
    /// next move cannot be a ping-pong); when that frees less than a
    /// quarter, every folio goes. Either way they are counted in
    /// `forgotten`.
    fn make_room(&mut self, now_ns: u64) {
        if self.folios.len() < MAX_FOLLOWED {
            return;
        }
        let before = self.folios.len();
        let since = now_ns.saturating_sub(PINGPONG_WINDOW_NS);
        self.folios
            .retain(|_, t| (t.promoted || t.was_promoted) && t.moved_ns >= since);
        if self.folios.len() > MAX_FOLLOWED / 4 * 3 {
            self.folios.clear();
        }
        self.forgotten += (before - self.folios.len()) as u64;
    }

    /// Promotions followed (of folios whose identity was read).
    pub fn promotions(&self) -> u64 {
        self.promotions
    }

    /// Ping-pongs: (folios, pages, re-promotions).
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.pingpong, self.pingpong_pages, self.repromotions)
    }

    /// Time on the top tier of each ping-pong, ns.
    pub fn residency(&self) -> &Log2Hist {
        &self.residency_ns
    }

    pub fn report(&self) -> LifecycleReport {
        let mut by_process: Vec<(u32, &Trips)> = self
            .by_process
            .iter()
            .filter(|(_, t)| t.pingpong > 0)
            .map(|(&p, t)| (p, t))
            .collect();
        by_process.sort_by(|a, b| b.1.pingpong.cmp(&a.1.pingpong).then(a.0.cmp(&b.0)));
        by_process.truncate(10);
        LifecycleReport {
            window_s: PINGPONG_WINDOW_NS as f64 / 1e9,
            promotions: self.promotions,
            pingpong: self.pingpong,
            pingpong_pages: self.pingpong_pages,
            demoted_after_window: self.demoted_late,
            returned: self.returned,
            repromotions: self.repromotions,
            residency_ms: self.residency_ns.rows(1e6),
            pingpong_by_process: by_process
                .into_iter()
                .map(|(pid, t)| ProcessPingpong {
                    pid,
                    promotions: t.promotions,
                    pingpong: t.pingpong,
                    residency_p50_ms: t.residency_p50_ms(),
                })
                .collect(),
            pingpong_by_nodes: super::demotions::node_pair_rows(&self.by_nodes, self.other_nodes),
            pingpong_by_cgroup: self.cgroup_rows(),
            forgotten: self.forgotten,
        }
    }

    /// The cgroups with the most ping-pongs (up to 10), and the others
    /// past the table's bound as cgroup id 0.
    fn cgroup_rows(&self) -> Vec<CgroupPingpong> {
        let mut rows: Vec<CgroupPingpong> = self
            .by_cgroup
            .iter()
            .filter(|(_, t)| t.pingpong > 0)
            .map(|(&cgroup_id, t)| CgroupPingpong {
                cgroup_id,
                pingpong: t.pingpong,
            })
            .collect();
        let others = self.other_cgroups.pingpong;
        if others != 0 {
            let other = super::cgroups::OTHER_CGROUPS;
            match rows.iter_mut().find(|r| r.cgroup_id == other) {
                Some(r) => r.pingpong += others,
                None => rows.push(CgroupPingpong {
                    cgroup_id: other,
                    pingpong: others,
                }),
            }
        }
        rows.sort_by(|a, b| {
            b.pingpong
                .cmp(&a.pingpong)
                .then(a.cgroup_id.cmp(&b.cgroup_id))
        });
        rows.truncate(10);
        rows
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
    /// Demoted folios promoted again; of those, folios that had been
    /// promoted before their demotion (promoted, demoted, promoted).
    pub returned: u64,
    pub repromotions: u64,
    /// Time on the top tier of each ping-pong, ms (log2 buckets).
    pub residency_ms: Vec<BucketCount>,
    /// The promoting processes with the most ping-pongs (up to 10).
    pub pingpong_by_process: Vec<ProcessPingpong>,
    /// Ping-pongs by the demotion's (top-tier, lower-tier) nodes.
    #[serde(default)]
    pub pingpong_by_nodes: Vec<super::demotions::NodePairRow>,
    /// The promoting faults' cgroups (v2 ids) with the most ping-pongs (up
    /// to 10; id 0: the cgroups past the table's bound, and faults whose
    /// cgroup was not read).
    #[serde(default)]
    pub pingpong_by_cgroup: Vec<CgroupPingpong>,
    /// Folios dropped from the table when it was full: their next move is
    /// not linked (see [`MAX_FOLLOWED`]).
    pub forgotten: u64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupPingpong {
    pub cgroup_id: u64,
    pub pingpong: u64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessPingpong {
    pub pid: u32,
    /// Its promotions, and of those, demoted again within the window.
    #[serde(default)]
    pub promotions: u64,
    pub pingpong: u64,
    /// The median time on the top tier of its ping-pongs (upper bound of
    /// a log2 bucket).
    #[serde(default)]
    pub residency_p50_ms: Option<u64>,
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
        assert_eq!(
            r.pingpong_by_process,
            vec![ProcessPingpong {
                pid: 42,
                promotions: 1,
                pingpong: 1,
                residency_p50_ms: Some(17_179),
            }]
        );
        assert_eq!(
            r.pingpong_by_nodes,
            vec![super::super::demotions::NodePairRow {
                src: Some(0),
                dst: Some(1),
                folios: 1
            }]
        );
        assert_eq!(
            r.pingpong_by_cgroup,
            vec![CgroupPingpong {
                cgroup_id: 9,
                pingpong: 1
            }]
        );
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
    fn a_full_table_forgets_folios_never_promoted_first() {
        let mut l = Lifecycle::default();
        l.fault(&promotion(S, 0xf2, 0), TOPTIER);
        for i in 1..MAX_FOLLOWED as u64 {
            l.demote(&demotion(S + i, 0xf3, i, i));
        }
        // Full: the next move makes room, keeping the promoted folio.
        l.demote(&demotion(2 * S, 0xf2, 0, 1));
        let r = l.report();
        assert_eq!((r.pingpong, r.forgotten), (1, MAX_FOLLOWED as u64 - 1));
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
        assert_eq!(r.forgotten, MAX_FOLLOWED as u64);
        assert_eq!(r.promotions, MAX_FOLLOWED as u64 + 10);
    }
}
