//! Per-process state (cumulative counts, rates of the last interval, the
//! touched address chunks).
use std::collections::{BTreeMap, VecDeque};

use numa_core::model::cgroups::Cgroups;
use rustc_hash::FxHashMap;

use super::{hists::Hists, Counts, Vma, MAX_CHUNKS_PER_PROC};

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Chunk {
    pub(super) faults: u64,
    pub(super) cur: u32,
    pub(super) scanned_cur: bool,
    pub(super) in_touched: bool,
}

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Range {
    pub(super) end: u64,
    pub(super) passes: u64,
    pub(super) ptes: u64,
    pub(super) last_ts: u64,
}

/// Rates of the last roll, per second.
#[derive(Debug, Clone, Default)]
pub(super) struct Rates {
    /// [`Counts`]' fields in their order, `[faults, local, decisions,
    /// promoted, rej_latency, rej_rate_limit, rej_other, migrate_fail,
    /// promoted_pages]`.
    pub(super) counts: [f64; 9],
    pub(super) models: Vec<f64>,
}

pub(super) fn rates_of(now: &Counts, prev: &Counts, dt_s: f64) -> [f64; 9] {
    let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt_s;
    [
        d(now.faults, prev.faults),
        d(now.local, prev.local),
        d(now.decisions, prev.decisions),
        d(now.promoted, prev.promoted),
        d(now.rej_latency, prev.rej_latency),
        d(now.rej_rate_limit, prev.rej_rate_limit),
        d(now.rej_other, prev.rej_other),
        d(now.migrate_fail, prev.migrate_fail),
        d(now.promoted_pages, prev.promoted_pages),
    ]
}

/// One table row's cumulative counts, the models' answers, and the rates
/// of the last interval: a process's, or a cgroup's.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) counts: Counts,
    pub(super) prev: Counts,
    pub(super) model_promote: Vec<u64>,
    pub(super) prev_model_promote: Vec<u64>,
    pub(super) model_agree: Vec<u64>,
    pub(super) rates: Rates,
    pub(super) hists: Hists,
}

impl Tally {
    /// Room for the answers of `models` models.
    pub(super) fn with_models(mut self, models: usize) -> Self {
        self.model_promote.resize(models, 0);
        self.prev_model_promote.resize(models, 0);
        self.model_agree.resize(models, 0);
        self.rates.models.resize(models, 0.0);
        self
    }

    /// Counts one model's answer `i` (promote, agrees with the kernel).
    pub(super) fn model(&mut self, i: usize, promote: bool, agrees: bool) {
        if let (Some(p), Some(a)) = (self.model_promote.get_mut(i), self.model_agree.get_mut(i)) {
            *p += u64::from(promote);
            *a += u64::from(agrees);
        }
    }

    /// Ends an interval of `dt_s` seconds: its rates.
    pub(super) fn roll(&mut self, dt_s: f64) {
        self.rates.counts = rates_of(&self.counts, &self.prev, dt_s);
        self.prev = self.counts;
        let now_prev = self.model_promote.iter().zip(&mut self.prev_model_promote);
        for (r, (now, prev)) in self.rates.models.iter_mut().zip(now_prev) {
            *r = now.saturating_sub(*prev) as f64 / dt_s;
            *prev = *now;
        }
    }
}

/// The row of cgroup `id` in `cgroups`, with room for `models` models.
pub(super) fn cgroup_tally(cgroups: &mut Cgroups<Tally>, id: u64, models: usize) -> &mut Tally {
    let t = cgroups.row_mut(id);
    if t.model_promote.len() != models {
        *t = std::mem::take(t).with_models(models);
    }
    t
}

#[derive(Debug, Default)]
pub(super) struct Proc {
    pub(super) pid: u32,
    pub(super) comm: String,
    pub(super) tally: Tally,
    /// Its cgroup (v2) id, from its latest fault or scan (0: not seen).
    pub(super) cgroup_id: u64,
    pub(super) last_ts: u64,
    pub(super) chunks: FxHashMap<u64, Chunk>,
    pub(super) touched: Vec<u64>,
    pub(super) heat: VecDeque<Vec<(u64, u32, bool)>>,
    pub(super) ranges: FxHashMap<u64, Range>,
    pub(super) scan_passes: u64,
    pub(super) ptes: u64,
    pub(super) skips: BTreeMap<String, u64>,
    pub(super) skip_by_start: FxHashMap<u64, u32>,
    pub(super) resident: Option<Vec<(u32, u64)>>,
    pub(super) vmas: Option<Vec<Vma>>,
}

impl Proc {
    pub(super) fn new(pid: u32, models: usize) -> Self {
        Proc {
            pid,
            tally: Tally::default().with_models(models),
            ..Proc::default()
        }
    }

    pub(super) fn chunk(&mut self, c: u64) -> Option<&mut Chunk> {
        let full = self.chunks.len() >= MAX_CHUNKS_PER_PROC;
        let ch = match self.chunks.entry(c) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(_) if full => return None,
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Chunk::default()),
        };
        if !ch.in_touched {
            ch.in_touched = true;
            self.touched.push(c);
        }
        Some(ch)
    }
}
