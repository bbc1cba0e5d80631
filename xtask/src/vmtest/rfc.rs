//! The fault-count RFC's patched kernel (series 6.12-rfc): numatrace
//! recognises it, reads its reasons as fault counts, and the `fault-count`
//! model decides as the patched kernel does.
//!
//! The seed's scenario: DRAM filled by another process (so promotion takes
//! the threshold path), hot chunks on the slow node with idle gaps. The
//! patched kernel compares `count - (count_at_scan >> 16 << 16)` with
//! `fault_count_threshold`; while a process has made fewer than 65536 hint
//! faults that is its fault count itself, so the default threshold (1e6)
//! would promote everything. The script sets it to 6000: the run's first
//! faults pass, the later ones are rejected, and a model that gets the
//! counter, the stamp or the threshold wrong disagrees on thousands of
//! decisions.
//!
//! Then, in the same boot, three processes of two threads sharing a
//! region on the slow node: the patch's counter is per mm and reset by
//! every clone, and a shared folio holds the count of whichever process's
//! scan or fault last wrote it, compared with the faulting process's own
//! count. (On this kernel the folio's field holds `count >> 16`, not a
//! time, so a fault's scanner pass is not found by its value: the folios
//! another process wrote are the ones its fault left, told by the folio's
//! slot.)
use std::path::Path;

use anyhow::{ensure, Context, Result};
use numa_core::doctor::{Report as DoctorReport, Status};
use numa_core::model::shadow::{ModelReport, ShadowReport};
use numa_core::model::totals::Report;
use numa_core::params::KernelHotness;

use crate::kernels::Series;
use crate::results::{
    entry, equal_but_missed, faults_match_vmstat, patch_counter_whole, promoted_pages_match_vmstat,
    read_report, text,
};

/// The threshold the script gives the kernel and the models.
pub(super) const THRESHOLD: u64 = 6000;
/// The threshold of the shared-memory run: each of its processes makes a
/// few thousand hint faults per counter reset, so its folios are promoted
/// below it and refused above, shared ones included.
pub(super) const SHARED_THRESHOLD: u64 = 2000;

pub(super) const SCRIPT: &str = include_str!("rfc.sh");

/// The model spec that is the patched kernel: patch 1/2 (per-process
/// count) with 2/2 (every scan pass re-stamps).
const KERNEL_MODEL: &str = "stamp=latest";
/// Agreement the kernel's own model must reach.
const MIN_AGREEMENT_PCT: f64 = 99.0;

pub(super) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let threshold = text(dir, "threshold")?;
    ensure!(
        threshold.trim() == THRESHOLD.to_string(),
        "fault_count_threshold reads {:?}, the script set {THRESHOLD}",
        threshold.trim()
    );
    check_doctor(&read_report(dir, "doctor.json")?)?;
    check_counters(&read_report(dir, "stats.json")?)?;
    let human = text(dir, "stats.txt")?;
    ensure!(
        human.contains("fault count over threshold") && !human.contains("latency over threshold"),
        "`numatrace stats` does not give the kernel's reason as \"fault count over threshold\":\n{human}"
    );
    check_agreement(&read_report::<ShadowReport>(dir, "shadow.json")?.models)?;
    check_shared(dir)
}

/// Decisions on shared folios the patched kernel took worth checking.
const MIN_STAMPED_ELSEWHERE: u64 = 200;

/// Three processes of two threads sharing a region: every count still
/// equals the kernel's, the patch's counter steps as the kernel's through
/// threads and clones, and the kernel's own model agrees with the patched
/// kernel overall and on the folios one process wrote and another's fault
/// found (where the kernel subtracts one mm's count from another's).
fn check_shared(dir: &Path) -> Result<()> {
    let s: Report = read_report(dir, "shared-stats.json")?;
    faults_match_vmstat(&s)?;
    promoted_pages_match_vmstat(&s)?;
    patch_counter_whole(&s)?;
    let shadow: ShadowReport = read_report(dir, "shared.json")?;
    check_agreement(&shadow.models)?;
    let m = kernel_model(&shadow.models)?;
    let threshold = m.params.get("threshold");
    ensure!(
        threshold.and_then(|t| t.parse::<u64>().ok()) == Some(SHARED_THRESHOLD),
        "the shared run's model has threshold {threshold:?}, the kernel {SHARED_THRESHOLD}"
    );
    let a = &m.agreement_stamped_elsewhere;
    let (agreed, total) = (
        a.both + a.neither,
        a.both + a.neither + a.kernel_only + a.model_only,
    );
    println!(
        "    on folios another process wrote: {agreed} of {total} decisions agree ({})",
        serde_json::to_value(a)?
    );
    ensure!(
        a.both > 0 && a.neither > 0,
        "on folios another process wrote the patched kernel promoted {} and refused {}: want both, or agreement proves nothing",
        a.both + a.kernel_only,
        a.neither + a.model_only
    );
    ensure!(
        total >= MIN_STAMPED_ELSEWHERE,
        "only {total} decisions on folios another process wrote (< {MIN_STAMPED_ELSEWHERE}): the shared region was hardly exercised"
    );
    ensure!(
        agreed as f64 >= total as f64 * MIN_AGREEMENT_PCT / 100.0,
        "on folios another process wrote the kernel's model agrees on {agreed} of {total} (< {MIN_AGREEMENT_PCT}%)"
    );
    Ok(())
}

/// The shadow report's fault-count model with the patched kernel's
/// stamps.
fn kernel_model(models: &[ModelReport]) -> Result<&ModelReport> {
    models
        .iter()
        .find(|m| is_kernel_model(m))
        .with_context(|| format!("no fault-count model with {KERNEL_MODEL} in the shadow report"))
}

/// Whether `m` is the fault-count model with the patched kernel's stamps.
fn is_kernel_model(m: &ModelReport) -> bool {
    m.name == "fault-count" && m.params.get("stamp").is_some_and(|s| s == "latest")
}

/// doctor recognises the patched kernel and its knob.
fn check_doctor(doc: &DoctorReport) -> Result<()> {
    ensure!(
        doc.ok,
        "numatrace doctor is not ok on the patched kernel: {:?}",
        doc.checks
    );
    ensure!(
        doc.kernel_hotness == KernelHotness::FaultCount,
        "doctor's kernel_hotness is {:?}, want FaultCount",
        doc.kernel_hotness
    );
    let knob = doc
        .check("fault_count_threshold")
        .context("doctor has no fault_count_threshold check")?;
    ensure!(
        knob.status == Status::Ok && knob.detail == format!("{THRESHOLD} faults"),
        "doctor's fault_count_threshold check: {knob:?}"
    );
    Ok(())
}

/// numatrace's counts equal the kernel's own (vmstat), and both kinds of
/// threshold decision happened, read as fault counts.
fn check_counters(s: &Report) -> Result<()> {
    let faults = s.hint_faults;
    ensure!(faults > 0, "no hint faults recorded");
    let missed = s.runs_missed;
    equal_but_missed(
        "hint faults vs vmstat numa_hint_faults",
        faults,
        entry(&s.vmstat_delta, "vmstat_delta", "numa_hint_faults")?,
        missed,
    )?;
    promoted_pages_match_vmstat(s)?;
    let decisions = s.decisions;
    let slow = s.checks.slow_node_faults;
    ensure!(
        decisions == slow,
        "decisions {decisions} != hint faults on slow-node folios {slow}"
    );
    ensure!(
        s.kernel_hotness == KernelHotness::FaultCount
            && s.kernel_threshold_reason == "fault count over threshold",
        "stats reads the kernel as {:?} / {:?}",
        s.kernel_hotness,
        s.kernel_threshold_reason
    );
    ensure!(
        s.kernel_promote > 0 && s.kernel_reject.latency > 0,
        "want promotions and rejections on the fault-count threshold, got {} and {}",
        s.kernel_promote,
        s.kernel_reject.latency
    );
    ensure!(
        s.checks.latency_rejects_below_threshold == 0,
        "rejections on the threshold whose kernel fault count < threshold"
    );
    ensure!(s.drops == 0, "ring buffer drops at default sizes");
    ensure!(
        s.kernel_histograms_match,
        "in-kernel histograms differ from the events'"
    );
    Ok(())
}

/// Each fault-count model's agreement; the patched kernel's own model
/// (1/2 + 2/2) must agree on >= 99% of decisions.
fn check_agreement(models: &[ModelReport]) -> Result<()> {
    let mut kernel_model = None;
    for m in models.iter().filter(|m| m.name == "fault-count") {
        let pct = m.agreement_pct;
        println!(
            "    fault-count {} agrees with the patched kernel on {pct:.2}% of decisions ({})",
            serde_json::to_value(&m.params)?,
            serde_json::to_value(&m.agreement)?
        );
        if is_kernel_model(m) {
            kernel_model = Some(pct);
        }
    }
    let pct = kernel_model.with_context(|| {
        format!("no fault-count model with {KERNEL_MODEL} in the shadow report")
    })?;
    ensure!(
        pct >= MIN_AGREEMENT_PCT,
        "fault-count ({KERNEL_MODEL}) agrees with the patched kernel on {pct:.2}% < {MIN_AGREEMENT_PCT}% of decisions"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn script_and_check_use_one_threshold() {
        let set = format!("echo {THRESHOLD} > $knob");
        assert!(SCRIPT.contains(&set));
        assert_eq!(
            SCRIPT.matches(&format!("threshold={THRESHOLD}")).count(),
            2,
            "both models take the kernel's threshold"
        );
        assert!(SCRIPT.contains(&format!("echo {SHARED_THRESHOLD} > $knob")));
        assert_eq!(
            SCRIPT
                .matches(&format!("threshold={SHARED_THRESHOLD}"))
                .count(),
            1,
            "the shared run's model takes its threshold"
        );
    }

    #[test]
    fn agreement_is_judged_on_the_kernels_own_model() {
        let model = |stamp: &str, agreement_pct: f64| ModelReport {
            name: "fault-count".into(),
            params: [("stamp".to_owned(), stamp.to_owned())].into(),
            agreement_pct,
            ..Default::default()
        };
        let report = |first: f64, latest: f64| [model("first", first), model("latest", latest)];
        assert!(check_agreement(&report(50.0, 99.5)).is_ok());
        assert!(check_agreement(&report(100.0, 98.9)).is_err());
        assert!(check_agreement(&[]).is_err());
    }

    #[test]
    fn doctor_must_name_the_fault_count_kernel() {
        let doc = |hotness: &str, detail: &str| {
            let mut v = super::super::doctor::tests::doctor(
                true,
                super::super::doctor::tests::two_tiers(),
                &[],
            );
            v["kernel_hotness"] = json!(hotness);
            v["checks"] = json!([{"name": "fault_count_threshold", "status": "ok",
                "detail": detail, "remedy": ""}]);
            serde_json::from_value(v).expect("doctor's report")
        };
        assert!(check_doctor(&doc("fault_count", "6000 faults")).is_ok());
        assert!(check_doctor(&doc("latency", "6000 faults")).is_err());
        assert!(check_doctor(&doc("fault_count", "1000000 faults")).is_err());
    }
}
