//! Hint faults: counts, shadow-model verdicts, histograms and heat.
use numa_core::{decode::comm, model::funnel::promoted_folio};
use numa_ebpf_common::{FaultEvent, Outcome};

use super::{
    hists::HistPoint,
    procs::{cgroup_tally, Proc},
    Aggregator, Counts, CHUNK_SHIFT,
};

impl Aggregator {
    pub(super) fn fault(&mut self, f: &FaultEvent) {
        let tgid = f.tgid();
        let outcome = f.typed_outcome();
        let decided = f.tiering_decision();
        let promoted = f.kernel_promoted();
        let local = f.has_fault_hook() && f.fault_local();
        let mig_fail = f.migrate_failed();
        let promoted_pages = if promoted_folio(f, self.toptier_mask) {
            f.pages()
        } else {
            0
        };
        self.lifecycle.fault(f, self.toptier_mask);
        self.note_threshold(f);
        self.sys_decided += u64::from(decided);
        let bump = |c: &mut Counts| {
            c.faults += 1;
            c.local += u64::from(local);
            c.migrate_fail += u64::from(mig_fail);
            c.promoted_pages += promoted_pages;
            if decided {
                c.decisions += 1;
                c.promoted += u64::from(promoted);
                match outcome {
                    Outcome::RejectLatency => c.rej_latency += 1,
                    Outcome::RejectRateLimit => c.rej_rate_limit += 1,
                    Outcome::RejectOther => c.rej_other += 1,
                    _ => {}
                }
            }
        };
        bump(&mut self.sys);
        let point = HistPoint::of(f, decided.then_some(promoted));
        if let Some(pt) = &point {
            self.sys_hists.add(pt);
        }
        // The process's and the cgroup's rows beside the models' counts
        // (not through `proc_mut`, which holds all of `self`).
        let n_models = self.models.len();
        let p = self
            .procs
            .touch(tgid, f.ts_ns, || Proc::new(tgid, n_models));
        let g = cgroup_tally(&mut self.cgroups, f.cgroup_id, n_models);
        for t in [&mut p.tally, &mut *g] {
            bump(&mut t.counts);
            if let Some(pt) = &point {
                t.hists.add(pt);
            }
        }
        p.last_ts = f.ts_ns;
        p.cgroup_id = f.cgroup_id;
        if p.comm.is_empty() {
            p.comm = comm(&f.comm);
        }
        // Every fault goes to the bank (its scan lookup keeps the
        // process's scans); each model's answer on a decision is counted
        // system-wide, for the process and for its cgroup.
        if let Some(answers) = self.bank.fault(f) {
            for (i, (a, m)) in answers.zip(&mut self.models).enumerate() {
                m.promote += u64::from(a.promote());
                m.agree += u64::from(a.agrees());
                p.tally.model(i, a.promote(), a.agrees());
                g.model(i, a.promote(), a.agrees());
            }
        }
        if let Some(ch) = p.chunk(f.addr >> CHUNK_SHIFT) {
            ch.faults += 1;
            ch.cur = ch.cur.saturating_add(1);
        }
        self.last_pid = Some(tgid);
    }

    /// The hot threshold the kernel reported per node (most faults repeat
    /// the last one: no map lookup).
    fn note_threshold(&mut self, f: &FaultEvent) {
        if f.has_kernel_latency()
            && f.threshold_ms > 0
            && self.last_threshold != Some((f.dst_nid, f.threshold_ms))
        {
            self.last_threshold = Some((f.dst_nid, f.threshold_ms));
            self.kernel_threshold.insert(f.dst_nid, f.threshold_ms);
        }
    }
}
