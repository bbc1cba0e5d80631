//! The policies run against a fault, for every caller (the shadow engine,
//! the per-fault verdicts, top's aggregator, the promoter): the scan index
//! their view is built from, which faults they are asked about, the loop
//! over them, and what each answer is compared with. Callers keep their
//! own counts of the answers, nothing else.
use std::slice::IterMut;

use numa_ebpf_common::{FaultEvent, ScanEvent};

use super::{Decision, FaultView, Policy};
use crate::model::{pagetable, scans::ScanIndex};

/// What the kernel did, as a policy's answer is compared with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Kernel {
    /// Its decision said promote, whatever its migration did next: the
    /// decision is what the policies compete on.
    #[default]
    Decided,
    /// Its decision said promote and the migration succeeded: the folio
    /// moved. What a promoter must not move again; a failed migration is
    /// left for it to retry.
    Moved,
}

impl Kernel {
    /// Whether the kernel promoted `f`, in this sense.
    #[inline]
    pub fn promoted(self, f: &FaultEvent) -> bool {
        match self {
            Kernel::Decided => f.kernel_promoted(),
            Kernel::Moved => f.kernel_promoted() && f.migrated(),
        }
    }
}

/// One policy's answer on a fault it was asked about, beside the kernel's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub decision: Decision,
    /// The kernel promoted the folio, in the bank's sense ([`Kernel`]).
    pub kernel: bool,
}

impl Answer {
    /// The policy would promote the folio.
    #[inline]
    pub fn promote(&self) -> bool {
        self.decision.promote
    }

    /// The policy and the kernel did the same.
    #[inline]
    pub fn agrees(&self) -> bool {
        self.decision.promote == self.kernel
    }

    /// The policy would promote a folio the kernel did not: a promotion
    /// it adds.
    #[inline]
    pub fn adds(&self) -> bool {
        self.decision.promote & !self.kernel
    }
}

/// The policies, in a fixed order, and the scan index they read.
pub struct PolicyBank {
    policies: Vec<Box<dyn Policy>>,
    /// The policies that prefetch (see [`Policy::prefetches`]).
    prefetching: Vec<usize>,
    scans: ScanIndex,
    kernel: Kernel,
}

impl PolicyBank {
    /// The bank of `policies`, their answers compared with the kernel's
    /// decision.
    pub fn new(policies: Vec<Box<dyn Policy>>) -> Self {
        let prefetching = (0..policies.len())
            .filter(|&i| policies[i].prefetches())
            .collect();
        PolicyBank {
            policies,
            prefetching,
            scans: ScanIndex::default(),
            kernel: Kernel::Decided,
        }
    }

    /// The answers compared with `kernel` instead of its decision.
    pub fn compared_with(mut self, kernel: Kernel) -> Self {
        self.kernel = kernel;
        self
    }

    pub fn len(&self) -> usize {
        self.policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The policies in the order of their answers (names, parameters,
    /// thresholds for a report).
    pub fn policies(&self) -> &[Box<dyn Policy>] {
        &self.policies
    }

    /// The policies' names, in the order of their answers.
    pub fn names(&self) -> Vec<String> {
        self.policies.iter().map(|p| p.name()).collect()
    }

    pub fn scan(&mut self, s: &ScanEvent) {
        self.scans.record(s);
    }

    /// Entries in the scan index and the processes they belong to.
    pub fn scan_index_len(&self) -> (usize, usize) {
        self.scans.len()
    }

    /// Whether the policies are asked about `f`: a decision the kernel
    /// made in tiering mode, what they compete on.
    #[inline]
    pub fn asks(f: &FaultEvent) -> bool {
        f.tiering_decision()
    }

    /// Whether the policies can be asked about `f`, one of [`asks`](Self::asks):
    /// without the folio's stamp (a folio the per-folio sampling does not
    /// follow) no model can judge it; the followed folios are the sample
    /// every model figure is from.
    #[inline]
    pub fn judges(f: &FaultEvent) -> bool {
        !f.unfollowed()
    }

    /// Tells the policies that prefetch of a fault's page key (packed as
    /// [`answers`](Self::answers) takes it) some events ahead.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        for &i in &self.prefetching {
            self.policies[i].prefetch(key);
        }
    }

    /// What the policies see of `f` besides the fault: its latest scan.
    /// To be called for every fault, asked or not: each one tells the
    /// index its process is still there, so a process that faults without
    /// decisions keeps its scans.
    #[inline]
    pub fn view(&mut self, f: &FaultEvent) -> FaultView {
        FaultView {
            latest_scan: self.scans.latest(f.tgid(), f.addr, f.ts_ns),
        }
    }

    /// Each policy's answer on `f`, in order, as the iterator is driven:
    /// for a fault the policies are asked about ([`asks`](Self::asks)),
    /// with its [`view`](Self::view) and its page key
    /// (`pagetable::pack`, 0 when it does not pack).
    #[inline]
    pub fn answers<'a>(&'a mut self, f: &'a FaultEvent, view: FaultView, key: u64) -> Answers<'a> {
        debug_assert!(Self::asks(f));
        Answers {
            policies: self.policies.iter_mut(),
            f,
            view,
            key,
            kernel: self.kernel.promoted(f),
        }
    }

    /// The whole job for one fault: its scan looked up, and each policy's
    /// answer if the policies are asked about it (`None` otherwise).
    #[inline]
    pub fn fault<'a>(&'a mut self, f: &'a FaultEvent) -> Option<Answers<'a>> {
        let view = self.view(f);
        if !Self::asks(f) || !Self::judges(f) {
            return None;
        }
        let key = pagetable::pack(f.tgid(), f.addr).unwrap_or(0);
        Some(self.answers(f, view, key))
    }
}

/// The answers on one fault, one per policy in the bank's order; a
/// policy decides when its answer is taken.
pub struct Answers<'a> {
    policies: IterMut<'a, Box<dyn Policy>>,
    f: &'a FaultEvent,
    view: FaultView,
    key: u64,
    kernel: bool,
}

impl Iterator for Answers<'_> {
    type Item = Answer;

    #[inline]
    fn next(&mut self) -> Option<Answer> {
        let p = self.policies.next()?;
        Some(Answer {
            decision: p.decide_keyed(self.f, &self.view, self.key),
            kernel: self.kernel,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.policies.size_hint()
    }
}

impl ExactSizeIterator for Answers<'_> {}

#[cfg(test)]
mod tests {
    use std::{cell::RefCell, collections::BTreeMap, rc::Rc};

    use numa_ebpf_common::{fault_flags as ff, Outcome};

    use super::*;
    use crate::{
        decode::fixtures::fault,
        model::{policy::Step, GONE_AFTER_NS},
    };

    /// What a stub policy was told: the scan start it saw per decision,
    /// the keys it was given, and the keys it was told to prefetch.
    #[derive(Default)]
    struct Seen {
        scans: Vec<Option<u64>>,
        keys: Vec<u64>,
        prefetched: Vec<u64>,
    }

    /// A policy that always says `promote`, under the reason `name`.
    struct Stub {
        name: &'static str,
        promote: bool,
        prefetches: bool,
        seen: Rc<RefCell<Seen>>,
    }

    impl Policy for Stub {
        fn name(&self) -> String {
            self.name.to_owned()
        }
        fn params(&self) -> BTreeMap<String, String> {
            BTreeMap::new()
        }
        fn decide(&mut self, ev: &FaultEvent, view: &FaultView) -> Decision {
            let key = pagetable::pack(ev.tgid(), ev.addr).unwrap_or(0);
            self.decide_keyed(ev, view, key)
        }
        fn decide_keyed(&mut self, _ev: &FaultEvent, view: &FaultView, key: u64) -> Decision {
            let mut seen = self.seen.borrow_mut();
            seen.scans.push(view.latest_scan.map(|s| s.ts_ns));
            seen.keys.push(key);
            Decision {
                promote: self.promote,
                reason: self.name,
                step: Step::Other,
            }
        }
        fn prefetch(&self, key: u64) {
            self.seen.borrow_mut().prefetched.push(key);
        }
        fn prefetches(&self) -> bool {
            self.prefetches
        }
    }

    fn stub(
        name: &'static str,
        promote: bool,
        prefetches: bool,
    ) -> (Box<dyn Policy>, Rc<RefCell<Seen>>) {
        let seen = Rc::new(RefCell::new(Seen::default()));
        let p = Stub {
            name,
            promote,
            prefetches,
            seen: Rc::clone(&seen),
        };
        (Box::new(p), seen)
    }

    /// A pass of process 42 at `ts_ns` over the fixture's addresses.
    fn pass(ts_ns: u64) -> ScanEvent {
        ScanEvent {
            pid_tgid: 42 << 32,
            start: 0x7f00_0000_0000,
            end: 0x7f00_4000_0000,
            ts_ns,
            ..ScanEvent::default()
        }
    }

    fn reasons(answers: Option<Answers<'_>>) -> Vec<(&'static str, bool, bool)> {
        answers
            .expect("asked")
            .map(|a| (a.decision.reason, a.promote(), a.kernel))
            .collect()
    }

    #[test]
    fn every_policy_answers_in_order_beside_the_kernels_decision() {
        let (no, _) = stub("no", false, false);
        let (yes, _) = stub("yes", true, false);
        let mut bank = PolicyBank::new(vec![no, yes]);
        assert_eq!(bank.names(), ["no", "yes"]);
        let refused = fault(1, 1, 5000, Outcome::RejectLatency);
        let promoted = fault(2, 2, 10, Outcome::PromoteHot);
        assert_eq!(
            reasons(bank.fault(&refused)),
            [("no", false, false), ("yes", true, false)]
        );
        assert_eq!(
            reasons(bank.fault(&promoted)),
            [("no", false, true), ("yes", true, true)]
        );
        let a: Vec<Answer> = bank.fault(&refused).expect("asked").collect();
        assert_eq!(
            a.iter().map(|a| (a.agrees(), a.adds())).collect::<Vec<_>>(),
            [(true, false), (false, true)]
        );
    }

    #[test]
    fn folios_the_sampling_does_not_follow_reach_no_policy() {
        let (p, seen) = stub("p", true, false);
        let mut bank = PolicyBank::new(vec![p]);
        let mut f = fault(1, 1, 10, Outcome::RejectLatency);
        assert_eq!(reasons(bank.fault(&f)), [("p", true, false)]);
        f.ext_flags |= numa_ebpf_common::ext_flags::UNFOLLOWED;
        assert!(bank.fault(&f).is_none());
        assert_eq!(seen.borrow().scans.len(), 1);
    }

    #[test]
    fn faults_that_are_not_tiering_decisions_reach_no_policy() {
        let (p, seen) = stub("p", true, false);
        let mut bank = PolicyBank::new(vec![p]);
        let mut not_tiering = fault(1, 1, 10, Outcome::NotTiering);
        assert!(bank.fault(&not_tiering).is_none());
        not_tiering.flags &= !ff::DECIDED;
        not_tiering.outcome = Outcome::PromoteHot as u8;
        assert!(bank.fault(&not_tiering).is_none());
        assert!(seen.borrow().scans.is_empty());
    }

    /// A failed migration: the kernel decided to promote, nothing moved.
    #[test]
    fn the_promoter_compares_with_what_moved() {
        let mut failed = fault(1, 1, 10, Outcome::PromoteHot);
        failed.flags |= ff::MIGRATE_TRIED;
        failed.migrate_ok = 0;
        let mut moved = failed;
        moved.migrate_ok = 1;
        let kernel = |k: Kernel, f: &FaultEvent| {
            let (p, _) = stub("p", true, false);
            let mut bank = PolicyBank::new(vec![p]).compared_with(k);
            let a: Vec<Answer> = bank.fault(f).expect("asked").collect();
            (a[0].kernel, a[0].adds())
        };
        assert_eq!(kernel(Kernel::Decided, &failed), (true, false));
        assert_eq!(kernel(Kernel::Moved, &failed), (false, true));
        assert_eq!(kernel(Kernel::Moved, &moved), (true, false));
    }

    /// Faults the policies are not asked about still keep the process's
    /// scans from being taken for gone.
    #[test]
    fn a_process_faulting_without_decisions_keeps_its_scans() {
        let run = |touch_between: bool| {
            let (p, seen) = stub("p", false, false);
            let mut bank = PolicyBank::new(vec![p]);
            let t0 = 1_000_000_000_000;
            bank.scan(&pass(t0));
            let step = GONE_AFTER_NS / 2;
            for i in 1..=3 {
                let mut f = fault(i, 1, 10, Outcome::NotTiering);
                f.ts_ns = t0 + i * step;
                if touch_between {
                    assert!(bank.fault(&f).is_none());
                }
            }
            let mut decided = fault(9, 1, 10, Outcome::RejectLatency);
            decided.ts_ns = t0 + 4 * step;
            assert_eq!(bank.fault(&decided).map(|a| a.count()), Some(1));
            seen.take().scans
        };
        assert_eq!(run(true), [Some(1_000_000_000_000)]);
        assert_eq!(run(false), [None], "silent for GONE_AFTER_NS: gone");
    }

    #[test]
    fn keys_are_packed_once_and_prefetch_reaches_only_prefetching_policies() {
        let (plain, plain_seen) = stub("plain", false, false);
        let (eager, eager_seen) = stub("eager", false, true);
        let mut bank = PolicyBank::new(vec![plain, eager]);
        let f = fault(1, 5, 10, Outcome::RejectLatency);
        let key = pagetable::pack(f.tgid(), f.addr).expect("packs");
        bank.prefetch(key);
        assert_eq!(bank.fault(&f).map(|a| a.count()), Some(2));
        // Taken lazily: a policy decides only when its answer is.
        let mut unaligned = f;
        unaligned.addr += 1;
        let first = bank.fault(&unaligned).and_then(|mut a| a.next());
        assert_eq!(first.map(|a| a.decision.reason), Some("plain"));
        assert_eq!(plain_seen.borrow().keys, [key, 0]);
        assert_eq!(eager_seen.borrow().keys, [key]);
        assert!(plain_seen.borrow().prefetched.is_empty());
        assert_eq!(eager_seen.borrow().prefetched, [key]);
    }
}
