//! The latency and fault-count histograms, one per process and one
//! system-wide, filled from each fault that carries a scan stamp.
use numa_core::model::log2::{upper_bound, Log2Hist};
use numa_ebpf_common::{log2_bucket, FaultEvent, HIST_BUCKETS};

/// Latency (ns) and fault-count histograms split by the kernel's decision.
#[derive(Debug, Clone)]
pub(super) struct Hists {
    pub(super) latency: [[u64; HIST_BUCKETS]; 2],
    pub(super) delta: [[u64; HIST_BUCKETS]; 2],
    pub(super) lat_all: Log2Hist,
    pub(super) delta_all: Log2Hist,
}

impl Default for Hists {
    fn default() -> Self {
        Hists {
            latency: [[0; HIST_BUCKETS]; 2],
            delta: [[0; HIST_BUCKETS]; 2],
            lat_all: Log2Hist::default(),
            delta_all: Log2Hist::default(),
        }
    }
}

/// A fault's histogram coordinates, computed once for every histogram it
/// goes into.
#[derive(Clone, Copy)]
pub(super) struct HistPoint {
    pub(super) lat: u64,
    pub(super) lat_b: usize,
    pub(super) delta: Option<(u64, usize)>,
    /// 0 promoted, 1 rejected, None undecided.
    pub(super) decision: Option<usize>,
}

impl HistPoint {
    pub(super) fn of(f: &FaultEvent, decided: Option<bool>) -> Option<HistPoint> {
        if !f.has_stamp() {
            return None;
        }
        let lat = f.ts_ns.saturating_sub(f.scan_ns);
        let delta = (!f.stamp_other_mm()).then(|| {
            let d = f.seq_mm.wrapping_sub(f.scan_seq_mm);
            (d, log2_bucket(d))
        });
        Some(HistPoint {
            lat,
            lat_b: log2_bucket(lat),
            delta,
            decision: decided.map(|p| usize::from(!p)),
        })
    }
}

fn hist_add(h: &mut Log2Hist, v: u64, b: usize) {
    h.buckets[b] += 1;
    h.sum = h.sum.saturating_add(v);
    h.count += 1;
}

impl Hists {
    pub(super) fn add(&mut self, p: &HistPoint) {
        hist_add(&mut self.lat_all, p.lat, p.lat_b);
        if let Some((d, b)) = p.delta {
            hist_add(&mut self.delta_all, d, b);
        }
        if let Some(i) = p.decision {
            self.latency[i][p.lat_b] += 1;
            if let Some((_, b)) = p.delta {
                self.delta[i][b] += 1;
            }
        }
    }
}

/// Bucket index of a threshold given in `unit`s of the histogram's value.
pub fn threshold_bucket(value: f64) -> usize {
    if !value.is_finite() || value <= 1.0 {
        return 0;
    }
    log2_bucket(value.ceil() as u64)
}

/// Upper bound of bucket `b`, re-exported for the views.
pub fn bucket_le(b: usize) -> u64 {
    upper_bound(b)
}
