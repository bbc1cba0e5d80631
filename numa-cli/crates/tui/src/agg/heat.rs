//! The address-space heat strip: per publication, the faults and scans of
//! each touched 2 MB chunk, grouped into address regions for display.
use crate::frame::{Heat, HeatRow};

use super::{procs::Proc, CHUNK_SHIFT, HEAT_ROWS, HEAT_SLOTS, MAX_SLOT_ENTRIES};

impl Proc {
    /// Closes the current heat slot.
    pub(super) fn roll_heat(&mut self) {
        let mut slot = Vec::with_capacity(self.touched.len().min(MAX_SLOT_ENTRIES));
        for c in self.touched.drain(..) {
            if let Some(ch) = self.chunks.get_mut(&c) {
                if slot.len() < MAX_SLOT_ENTRIES {
                    slot.push((c, ch.cur, ch.scanned_cur));
                }
                ch.cur = 0;
                ch.scanned_cur = false;
                ch.in_touched = false;
            }
        }
        if self.heat.len() == HEAT_SLOTS {
            self.heat.pop_front();
        }
        self.heat.push_back(slot);
    }
}

/// Groups sorted chunk numbers into at most `rows` address regions: first
/// at the widest gaps (unrelated mappings), then by halving the largest
/// region. Returns index ranges into `chunks`.
pub fn regions(chunks: &[u64], rows: usize) -> Vec<std::ops::Range<usize>> {
    if chunks.is_empty() || rows == 0 {
        return Vec::new();
    }
    let mut gaps: Vec<(u64, usize)> = chunks
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w[1] - w[0] > 1)
        .map(|(i, w)| (w[1] - w[0], i + 1))
        .collect();
    gaps.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut cuts: Vec<usize> = gaps.iter().take(rows - 1).map(|g| g.1).collect();
    cuts.sort_unstable();
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    let mut start = 0;
    for c in cuts {
        out.push(start..c);
        start = c;
    }
    out.push(start..chunks.len());
    while out.len() < rows {
        let Some((i, r)) = out
            .iter()
            .enumerate()
            .max_by_key(|(_, r)| (r.len(), std::cmp::Reverse(r.start)))
            .map(|(i, r)| (i, r.clone()))
        else {
            break;
        };
        if r.len() < 2 {
            break;
        }
        let mid = r.start + r.len() / 2;
        out[i] = r.start..mid;
        out.insert(i + 1, mid..r.end);
    }
    out
}

pub(super) fn heat(p: &Proc) -> Heat {
    let mut chunks: Vec<u64> = p.heat.iter().flat_map(|s| s.iter().map(|e| e.0)).collect();
    chunks.sort_unstable();
    chunks.dedup();
    let groups = regions(&chunks, HEAT_ROWS);
    let slots = HEAT_SLOTS;
    let pad = slots.saturating_sub(p.heat.len());
    let mut rows: Vec<HeatRow> = groups
        .iter()
        .map(|g| HeatRow {
            start: chunks[g.start] << CHUNK_SHIFT,
            end: (chunks[g.end - 1] + 1) << CHUNK_SHIFT,
            faults: vec![0; slots],
            scanned: vec![false; slots],
        })
        .collect();
    let mut max = 0;
    for (j, slot) in p.heat.iter().enumerate() {
        for (c, n, scanned) in slot {
            let Ok(idx) = chunks.binary_search(c) else {
                continue;
            };
            let Some(gi) = groups.iter().position(|g| g.contains(&idx)) else {
                continue;
            };
            let cell = &mut rows[gi].faults[pad + j];
            *cell = cell.saturating_add(*n);
            max = max.max(*cell);
            rows[gi].scanned[pad + j] |= *scanned;
        }
    }
    Heat { rows, slots, max }
}
