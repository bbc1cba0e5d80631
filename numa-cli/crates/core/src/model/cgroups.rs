//! The hint faults, decisions and migrations of each cgroup (v2), in
//! pages, as the kernel's per-memcg `memory.stat` counts them: a fault is
//! the faulting task's cgroup (`bpf_get_current_cgroup_id` at the fault);
//! the kernel's memcg counters charge the folio's memcg instead, so the
//! two agree when a cgroup faults on memory it allocated.
//!
//! Cgroups are few next to processes, but a host that creates them by
//! the thousand (a container per request) must not make this grow: past
//! [`MAX_CGROUPS`] ids the rest are summed in one row, id [`OTHER_CGROUPS`].
use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use numa_ebpf_common::{FaultEvent, Outcome};

use super::totals::PageCounts;

/// Paths of cgroup ids that exist now (`numa_host::cgroup::paths`); ids
/// without one are left out. Given to the outputs that name cgroups,
/// which cannot reach the host themselves.
pub type PathLookup = Box<dyn Fn(&BTreeSet<u64>) -> BTreeMap<u64, String> + Send>;

/// Paths already looked up, so a cgroup costs one walk of the cgroup tree
/// when first seen, not one per report: at most [`MAX_CGROUPS`] ids (past
/// it the cache starts over), None for an id not found then.
pub struct PathCache {
    lookup: PathLookup,
    known: FxHashMap<u64, Option<String>>,
}

impl PathCache {
    pub fn new(lookup: PathLookup) -> Self {
        PathCache {
            lookup,
            known: FxHashMap::default(),
        }
    }

    /// Looks up the ids among `ids` not seen before.
    pub fn learn(&mut self, ids: impl Iterator<Item = u64>) {
        let new: BTreeSet<u64> = ids.filter(|id| !self.known.contains_key(id)).collect();
        if new.is_empty() {
            return;
        }
        if self.known.len() + new.len() > MAX_CGROUPS {
            self.known.clear();
        }
        let mut found = (self.lookup)(&new);
        self.known
            .extend(new.iter().map(|id| (*id, found.remove(id))));
    }

    /// The path of `id`, when learnt and found.
    pub fn path(&self, id: u64) -> Option<&str> {
        self.known.get(&id)?.as_deref()
    }
}

impl std::fmt::Debug for PathCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathCache")
            .field("known", &self.known.len())
            .finish()
    }
}

/// Cgroups with a row of their own at most.
pub const MAX_CGROUPS: usize = 4096;
/// The id of the row that sums the cgroups past [`MAX_CGROUPS`] (no
/// cgroup has it: ids are inode numbers, and 0 is none's).
pub const OTHER_CGROUPS: u64 = 0;

/// One `T` per cgroup id, bounded: past [`MAX_CGROUPS`] ids, the rest
/// share the row [`OTHER_CGROUPS`].
#[derive(Debug, Clone)]
pub struct Cgroups<T = PageCounts> {
    rows: FxHashMap<u64, T>,
}

impl<T> Default for Cgroups<T> {
    fn default() -> Self {
        Cgroups {
            rows: FxHashMap::default(),
        }
    }
}

impl<T: Default> Cgroups<T> {
    /// The row of cgroup `id`, or of the others past the bound.
    pub fn row_mut(&mut self, id: u64) -> &mut T {
        let id = if self.rows.len() < MAX_CGROUPS || self.rows.contains_key(&id) {
            id
        } else {
            OTHER_CGROUPS
        };
        self.rows.entry(id).or_default()
    }

    /// The row of `id` (the others' for [`OTHER_CGROUPS`]).
    pub fn get(&self, id: u64) -> Option<&T> {
        self.rows.get(&id)
    }

    /// Every row with its id.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> + '_ {
        self.rows.iter().map(|(&id, t)| (id, t))
    }

    /// Every row with its id, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut T)> + '_ {
        self.rows.iter_mut().map(|(&id, t)| (id, t))
    }

    /// Ids with a row of their own.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.rows.keys().copied().filter(|&id| id != OTHER_CGROUPS)
    }
}

/// One cgroup's figures in a report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CgroupRow {
    /// The cgroup's id (its directory's inode number), or
    /// [`OTHER_CGROUPS`] for the row that sums the cgroups past the bound.
    pub id: u64,
    /// Its path below the cgroup2 mount (`/` the root), found when the
    /// report was made; None when no cgroup has that id on this host then
    /// (removed since, or a trace from another boot).
    pub path: Option<String>,
    pub counts: PageCounts,
    /// Where its slow-tier pages stop (the funnel of all its processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub funnel: Option<CgroupFunnel>,
}

/// A cgroup's funnel: the stages of all its processes, and the verdict.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CgroupFunnel {
    pub verdict: String,
    pub verdict_kind: std::borrow::Cow<'static, str>,
    #[serde(flatten)]
    pub stages: super::funnel::StageRow,
}

impl Cgroups {
    /// Counts fault `f`, whose kernel decision was `outcome`.
    pub fn fault(&mut self, f: &FaultEvent, outcome: Outcome, toptier_mask: u64) {
        self.row_mut(f.cgroup_id).fault(f, outcome, toptier_mask);
    }

    /// Every cgroup's row, the most hint faults first, paths from `path_of`.
    pub fn rows(&self, path_of: impl Fn(u64) -> Option<String>) -> Vec<CgroupRow> {
        let mut rows: Vec<CgroupRow> = self
            .rows
            .iter()
            .map(|(&id, counts)| CgroupRow {
                id,
                path: (id != OTHER_CGROUPS).then(|| path_of(id)).flatten(),
                counts: counts.clone(),
                funnel: None,
            })
            .collect();
        rows.sort_by(|a, b| {
            b.counts
                .hint_faults
                .cmp(&a.counts.hint_faults)
                .then(a.id.cmp(&b.id))
        });
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::fixtures::fault;

    #[test]
    fn each_cgroup_counts_its_own_faults_and_the_bound_holds() {
        let mut c = Cgroups::default();
        let mut f = fault(1, 1, 500, Outcome::RejectLatency);
        for id in 1..=(MAX_CGROUPS as u64 + 10) {
            f.cgroup_id = id;
            c.fault(&f, Outcome::RejectLatency, 1);
        }
        f.cgroup_id = 7;
        c.fault(&f, Outcome::RejectLatency, 1);
        let rows = c.rows(|id| Some(format!("/c{id}")));
        assert_eq!(rows.len(), MAX_CGROUPS + 1);
        // The rest summed first, then the busiest cgroup.
        assert_eq!(rows[1].id, 7);
        assert_eq!(rows[1].counts.hint_faults, 2 * f.pages());
        assert_eq!(rows[1].path.as_deref(), Some("/c7"));
        let other = rows.iter().find(|r| r.id == OTHER_CGROUPS);
        let other = other.map(|r| (r.counts.hint_faults, r.path.clone()));
        assert_eq!(other, Some((10 * f.pages(), None)));
    }
}
