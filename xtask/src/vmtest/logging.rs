//! The one logger, end to end: a condition the BPF programs detect and log
//! (aya-log) reaches the user through numatrace's logger, `-v` adds the
//! userspace debug messages, and `-q` silences both, the probes' included.
//!
//! The condition: `numa_balancing` changed under attached probes. The
//! command numatrace starts (after attaching) switches the mode from 2 to 1
//! and then runs a workload, so every decision the probes see is under a
//! mode other than the one at attach time.
use std::path::Path;

use anyhow::{ensure, Result};
use numa_core::model::totals::Report;

use crate::kernels::Series;
use crate::results::{entry, read_report, text};

pub(super) const SCRIPT: &str = include_str!("logging.sh");

/// The probes' message for a mode change from 2 to 1, as the user reads it.
const PROBE_WARNING: &str =
    "numatrace: warning: probe: numa_balancing is 1 now, 2 when the probes were attached";

pub(super) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    for run in ["verbose", "quiet"] {
        let rc = text(dir, &format!("{run}.rc"))?;
        ensure!(rc.trim() == "0", "the {run} run exited with {}", rc.trim());
        let s: Report = read_report(dir, &format!("{run}.json"))?;
        let counter = |name: &str| entry(&s.kernel_counters, "kernel_counters", name);
        let changed = counter("balancing_mode_changed")?;
        ensure!(
            changed > 0,
            "{run}: the probes counted no decision under the changed mode ({} decisions in all): the workload made no decision after the switch",
            counter("decisions")?
        );
    }
    let verbose = text(dir, "verbose.err")?;
    ensure!(
        verbose.contains(PROBE_WARNING),
        "-v: the probes' warning did not reach stderr; it holds:\n{verbose}"
    );
    ensure!(
        verbose.contains("numatrace: debug: [numa_probe::load]") && verbose.contains("attached"),
        "-v: no debug message about attaching; stderr holds:\n{verbose}"
    );
    // -v is numatrace's debug, not its loader's (aya logs every relocation).
    ensure!(
        !verbose.contains("[aya"),
        "-v: the BPF loader's debug messages are shown, which -v should leave to -vv"
    );
    let quiet = text(dir, "quiet.err")?;
    ensure!(
        !quiet.contains("numatrace:"),
        "-q: stderr should hold no message, but holds:\n{quiet}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::empty_report;

    fn results(verbose_err: &str, quiet_err: &str, changed: u64) -> tempdir::Dir {
        let d = tempdir::Dir::new();
        let mut report = empty_report();
        let counters = &mut report.kernel_counters;
        counters.insert("balancing_mode_changed".into(), changed);
        counters.insert("decisions".into(), 9);
        let json = serde_json::to_string(&report).expect("a report");
        for run in ["verbose", "quiet"] {
            d.put(&format!("{run}.rc"), "0\n");
            d.put(&format!("{run}.json"), &json);
        }
        d.put("verbose.err", verbose_err);
        d.put("quiet.err", quiet_err);
        d
    }

    mod tempdir {
        pub(super) struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub(super) fn new() -> Dir {
                static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let p =
                    std::env::temp_dir().join(format!("xtask-logging-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&p).expect("temp dir");
                Dir(p)
            }
            pub(super) fn put(&self, name: &str, body: &str) {
                std::fs::write(self.0.join(name), body).expect("write");
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    const DEBUG: &str = "numatrace: debug: [numa_probe::load] HintFault: attached fentry to x\n";

    #[test]
    fn the_probes_warning_under_v_and_silence_under_q_pass() {
        let verbose =
            format!("{DEBUG}{PROBE_WARNING} (decisions under the new mode on this CPU: 1)\n");
        let d = results(&verbose, "", 12);
        check(&d.0, "", Series::V6_12).expect("pass");
    }

    #[test]
    fn a_missing_probe_warning_a_noisy_q_or_no_switch_fail() {
        let d = results(DEBUG, "", 12);
        assert!(
            format!("{:#}", check(&d.0, "", Series::V6_12).expect_err("fails"))
                .contains("did not reach")
        );
        let verbose = format!("{DEBUG}{PROBE_WARNING}\n");
        let d = results(&verbose, "numatrace: warning: probe: x\n", 12);
        assert!(format!("{:#}", check(&d.0, "", Series::V6_12).expect_err("fails")).contains("-q"));
        let d = results(&verbose, "", 0);
        assert!(
            format!("{:#}", check(&d.0, "", Series::V6_12).expect_err("fails"))
                .contains("no decision")
        );
    }
}
