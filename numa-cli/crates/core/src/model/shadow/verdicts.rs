//! The models' answers fault by fault, for outputs that keep every fault
//! (`dump --format parquet`): the same questions the shadow engine asks,
//! with the same views, without its tallies.
use numa_ebpf_common::{FaultEvent, ScanEvent};

use super::asked;
use crate::model::{
    policy::{FaultView, Policy},
    scans::ScanIndex,
};

pub struct FaultVerdicts {
    policies: Vec<Box<dyn Policy>>,
    scans: ScanIndex,
}

impl FaultVerdicts {
    pub fn new(policies: Vec<Box<dyn Policy>>) -> Self {
        FaultVerdicts {
            policies,
            scans: ScanIndex::default(),
        }
    }

    /// The models' names, in the order of their answers.
    pub fn names(&self) -> Vec<String> {
        self.policies.iter().map(|p| p.name()).collect()
    }

    pub fn scan(&mut self, s: &ScanEvent) {
        self.scans.record(s);
    }

    /// Whether each model would promote `f`, in [`names`](Self::names)'
    /// order; `None` for a fault the models are not asked about (no
    /// tiering decision), as the shadow engine leaves it out.
    pub fn fault(&mut self, f: &FaultEvent, out: &mut Vec<Option<bool>>) {
        out.clear();
        // Looked up for every fault, as the engine does: each one tells
        // the index its process is still there.
        let view = FaultView {
            latest_scan: self
                .scans
                .latest((f.pid_tgid >> 32) as u32, f.addr, f.ts_ns),
        };
        let ask = asked(f);
        out.extend(
            self.policies
                .iter_mut()
                .map(|p| ask.then(|| p.decide(f, &view).promote)),
        );
    }
}
