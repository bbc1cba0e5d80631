//! Per-process state (cumulative counts, rates of the last interval, the
//! touched address chunks).
use std::collections::{BTreeMap, VecDeque};

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

#[derive(Debug, Default)]
pub(super) struct Proc {
    pub(super) pid: u32,
    pub(super) comm: String,
    pub(super) counts: Counts,
    pub(super) prev: Counts,
    pub(super) model_promote: Vec<u64>,
    pub(super) prev_model_promote: Vec<u64>,
    pub(super) model_agree: Vec<u64>,
    pub(super) rates: Rates,
    pub(super) hists: Hists,
    pub(super) last_ts: u64,
    pub(super) chunks: FxHashMap<u64, Chunk>,
    pub(super) touched: Vec<u64>,
    pub(super) heat: VecDeque<Vec<(u64, u32, bool)>>,
    pub(super) ranges: FxHashMap<u64, Range>,
    pub(super) scan_passes: u64,
    pub(super) ptes: u64,
    pub(super) stamps: u64,
    pub(super) skips: BTreeMap<String, u64>,
    pub(super) skip_by_start: FxHashMap<u64, u32>,
    pub(super) resident: Option<Vec<(u32, u64)>>,
    pub(super) vmas: Option<Vec<Vma>>,
}

impl Proc {
    pub(super) fn new(pid: u32, models: usize) -> Self {
        Proc {
            pid,
            model_promote: vec![0; models],
            prev_model_promote: vec![0; models],
            model_agree: vec![0; models],
            rates: Rates {
                counts: [0.0; 9],
                models: vec![0.0; models],
            },
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
