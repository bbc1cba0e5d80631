//! The models' answers fault by fault, for outputs that keep every fault
//! (`dump --format parquet`): the same questions the shadow engine asks,
//! with the same views, without its tallies.
use numa_ebpf_common::{FaultEvent, ScanEvent};

use crate::model::policy::{Policy, PolicyBank};

pub struct FaultVerdicts {
    bank: PolicyBank,
}

impl FaultVerdicts {
    pub fn new(policies: Vec<Box<dyn Policy>>) -> Self {
        FaultVerdicts {
            bank: PolicyBank::new(policies),
        }
    }

    /// The models' names, in the order of their answers.
    pub fn names(&self) -> Vec<String> {
        self.bank.names()
    }

    pub fn scan(&mut self, s: &ScanEvent) {
        self.bank.scan(s);
    }

    /// Whether each model would promote `f`, in [`names`](Self::names)'
    /// order; `None` for a fault the models are not asked about (no
    /// tiering decision), as the shadow engine leaves it out.
    pub fn fault(&mut self, f: &FaultEvent, out: &mut Vec<Option<bool>>) {
        out.clear();
        match self.bank.fault(f) {
            Some(answers) => out.extend(answers.map(|a| Some(a.promote()))),
            None => out.resize(self.bank.len(), None),
        }
    }
}

#[cfg(test)]
mod tests {
    use numa_ebpf_common::Outcome;

    use super::*;
    use crate::{
        decode::{fixtures::fault, Event},
        model::{
            policy::{build_all, KernelDefaults, ModelDefaults},
            shadow::Shadow,
        },
    };

    fn models() -> Vec<Box<dyn Policy>> {
        build_all(&[], &ModelDefaults::default(), &KernelDefaults::default()).expect("models")
    }

    #[test]
    fn fault_by_fault_the_answers_are_the_engines() {
        let mut faults: Vec<_> = (1..=40)
            .map(|i| {
                let outcome = if i % 3 == 0 {
                    Outcome::PromoteHot
                } else {
                    Outcome::RejectLatency
                };
                fault(i, i % 7, 100 * i, outcome)
            })
            .collect();
        // Not a tiering decision: no model is asked.
        faults[5].outcome = Outcome::NotTiering as u8;
        let mut engine = Shadow::new(models(), 10);
        let mut each = FaultVerdicts::new(models());
        let mut added = vec![0u64; each.names().len()];
        let mut out = Vec::new();
        for f in &faults {
            engine.event(&Event::Fault(*f));
            each.fault(f, &mut out);
            for (n, v) in added.iter_mut().zip(&out) {
                *n += u64::from(*v == Some(true) && !f.kernel_promoted());
            }
        }
        each.fault(&faults[5], &mut out);
        assert!(out.iter().all(Option::is_none), "{out:?}");
        let report = engine.report();
        let engine_added: Vec<u64> = report
            .models
            .iter()
            .map(|m| m.agreement.model_only)
            .collect();
        assert_eq!(added, engine_added);
        assert!(added.iter().any(|&n| n > 0), "some model adds promotions");
    }
}
