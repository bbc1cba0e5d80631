//! numatrace as a Debian package under systemd, in the systemd guest (a
//! Debian userland with systemd as PID 1, guest_image.rs): the .deb
//! installs with apt and `numatrace doctor` passes; the exporter unit,
//! sandboxed as shipped, attaches, and Prometheus (its own Debian unit)
//! scrapes it; Prometheus' view of the hint-fault counter over a workload
//! is the kernel's (/proc/vmstat's numa_hint_faults delta, within the 5%
//! the export test allows between its event and kernel counts); a probe
//! warning reaches the journal; SIGKILL and restart, and stop, leave
//! nothing behind; the shadow unit writes its trace and report into
//! /var/lib/numatrace with the documented modes.
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use crate::kernels::Series;
use crate::results::{read_json, text};

pub(super) const SCRIPT: &str = include_str!("systemd.sh");

/// The probes' message when numa_balancing changes under them (as in the
/// logging test), as the journal holds it.
const PROBE_WARNING: &str = "numa_balancing is 1 now, 2 when the probes were attached";

/// Prometheus' hint-fault count may differ from vmstat's by this share of
/// it: the export test's bound between two counts of one window.
const TOLERANCE: f64 = 0.05;

pub(super) fn check(dir: &Path, _console: &str, _series: Series) -> Result<()> {
    let rc = |name: &str| -> Result<String> { Ok(text(dir, name)?.trim().to_string()) };
    let apt = text(dir, "apt.log").unwrap_or_default();
    ensure!(
        rc("apt.rc")? == "0",
        "apt-get install of the .deb failed:\n{apt}"
    );
    let doctor = text(dir, "doctor.txt").unwrap_or_default();
    ensure!(
        rc("doctor.rc")? == "0",
        "numatrace doctor failed:\n{doctor}"
    );
    ensure!(
        rc("prometheus-restart.rc")? == "0",
        "systemctl restart prometheus failed"
    );
    let status = text(dir, "export-status.txt").unwrap_or_default();
    let journal = text(dir, "journal-export.txt").unwrap_or_default();
    ensure!(
        rc("enable.rc")? == "0" && rc("exporter-up.rc")? == "0",
        "numatrace-export.service did not answer with kernel metrics within 180 s of \
         `systemctl enable --now`:\n{status}\n{journal}"
    );
    if let Ok(times) = text(dir, "attach-uptime.txt") {
        println!(
            "systemd: exporter enable -> answering (guest uptime s): {}",
            times.trim()
        );
    }
    let up =
        instant_value(&read_json(dir, "up.json")?).context("Prometheus' up{job=\"numatrace\"}")?;
    ensure!(
        up == 1.0,
        "Prometheus' up{{job=\"numatrace\"}} is {up}, not 1"
    );
    check_hint_faults(dir)?;

    let warnings = text(dir, "journal-warning.txt")?;
    ensure!(
        warnings.contains(PROBE_WARNING),
        "the probes' warning is not in `journalctl -t numatrace -p warning`:\n{warnings}"
    );

    let security = text(dir, "security.txt")?;
    let exposure = security
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .with_context(|| format!("no exposure level from systemd-analyze security:\n{security}"))?;
    println!("systemd: numatrace-export.service: {}", exposure.trim());

    ensure!(
        rc("kill.rc")? == "0" && rc("restart.rc")? == "0",
        "systemctl kill -s KILL / restart numatrace-export failed"
    );
    ensure!(
        rc("restart-up.rc")? == "0",
        "the exporter did not answer again after SIGKILL and restart:\n{}",
        text(dir, "after-restart-show.txt").unwrap_or_default()
    );

    let (before, after) = (rc("pid-before-kill.txt")?, rc("pid-after-restart.txt")?);
    ensure!(
        before != "0" && after != "0" && before != after,
        "the exporter's main PID was {before} before SIGKILL and {after} after the restart"
    );

    ensure!(
        rc("stop.rc")? == "0",
        "systemctl stop numatrace-export failed"
    );
    let loaded = rc("loaded-after-stop.count")?;
    ensure!(
        loaded == "0",
        "{loaded} BPF objects of numatrace's still loaded after the unit stopped:\n{}",
        text(dir, "loaded-after-stop.txt").unwrap_or_default()
    );
    let state = text(dir, "state-after-stop.txt")?;
    ensure!(
        state.trim().is_empty(),
        "files left after the exporter stopped:\n{state}"
    );

    check_shadow(dir)
}

/// The value of a one-series instant vector from Prometheus' query API.
fn instant_value(v: &Value) -> Result<f64> {
    ensure!(v["status"] == "success", "query failed: {v}");
    let result = v["data"]["result"]
        .as_array()
        .with_context(|| format!("no result vector: {v}"))?;
    let [series] = result.as_slice() else {
        bail!("{} series, not one: {v}", result.len());
    };
    series["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no sample value: {v}"))
}

fn vmstat(dir: &Path, name: &str) -> Result<u64> {
    let t = text(dir, name)?;
    t.trim()
        .parse()
        .with_context(|| format!("{name}: not a count: {t:?}"))
}

/// Prometheus' hint-fault series moved by what /proc/vmstat counted over
/// the workload.
fn check_hint_faults(dir: &Path) -> Result<()> {
    ensure!(
        text(dir, "workload.rc")?.trim() == "0",
        "the workload failed:\n{}",
        text(dir, "workload.log").unwrap_or_default()
    );
    let (v0, v1) = (
        vmstat(dir, "vmstat-before.txt")?,
        vmstat(dir, "vmstat-after.txt")?,
    );
    let (v0b, v1b) = (
        vmstat(dir, "vmstat-before2.txt")?,
        vmstat(dir, "vmstat-after2.txt")?,
    );
    let p0 = instant_value(&read_json(dir, "prom-before.json")?)
        .context("numatrace_hint_faults_total before the workload")?;
    let p1 = instant_value(&read_json(dir, "prom-after.json")?)
        .context("numatrace_hint_faults_total after the workload")?;
    let kernel = v1.saturating_sub(v0) as f64;
    let prometheus = p1 - p0;
    println!(
        "systemd: hint faults over the workload: vmstat {kernel} ({v0}..{v1}; \
         {v0b} and {v1b} a scrape later), Prometheus {prometheus} ({p0}..{p1})"
    );
    ensure!(kernel > 0.0, "the workload took no hint faults");
    ensure!(
        (prometheus - kernel).abs() <= TOLERANCE * kernel,
        "Prometheus saw {prometheus} hint faults over the workload, vmstat {kernel} \
         (vmstat {v0}->{v1}, {v0b}/{v1b} a scrape later; Prometheus {p0}->{p1})"
    );
    Ok(())
}

/// The shadow unit's period ran: a trace and a report in
/// /var/lib/numatrace, owned by root; the directory 0700 (the unit's
/// StateDirectoryMode), the trace 0600 (docs/commands.md: traces are
/// their owner's only), the report writable by its owner only (reports
/// are created 0644 less the umask).
fn check_shadow(dir: &Path) -> Result<()> {
    let journal = text(dir, "journal-shadow.txt").unwrap_or_default();
    ensure!(
        text(dir, "shadow-report.rc")?.trim() == "0",
        "numatrace-shadow.service wrote no report within 240 s:\n{journal}"
    );
    let modes = text(dir, "shadow-modes.txt")?;
    let mut saw = (false, false, false);
    for line in modes.lines() {
        let mut f = line.split_whitespace();
        let (Some(mode), Some(owner), Some(path)) = (f.next(), f.next(), f.next()) else {
            bail!("not `mode owner path`: {line:?}");
        };
        let bits =
            u32::from_str_radix(mode, 8).with_context(|| format!("not an octal mode: {line:?}"))?;
        ensure!(owner == "root", "{path} is owned by {owner}, not root");
        if path == "/var/lib/numatrace" {
            saw.0 = true;
            ensure!(bits == 0o700, "{path} is mode {mode}, not 700");
        } else if path.ends_with(".trace") {
            saw.1 = true;
            ensure!(bits == 0o600, "{path} is mode {mode}, not 600");
        } else if path.ends_with(".json") {
            saw.2 = true;
            ensure!(
                bits & 0o022 == 0,
                "{path} is mode {mode}: writable by group or others"
            );
        } else {
            bail!("unexpected file in /var/lib/numatrace: {line}");
        }
    }
    ensure!(
        saw == (true, true, true),
        "no directory, trace or report among:\n{modes}"
    );
    let report = read_json(dir, "shadow-report.json")?;
    ensure!(
        report.is_object(),
        "the shadow report is not a JSON object: {report}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A results directory as a passing run leaves it; dropped with it.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn passing() -> Dir {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("xtask-systemd-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&p).expect("temp dir");
            let d = Dir(p);
            let vector = |v: &str| {
                format!(
                    r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[1.0,"{v}"]}}]}}}}"#
                )
            };
            for rc in [
                "apt.rc",
                "doctor.rc",
                "prometheus-restart.rc",
                "enable.rc",
                "exporter-up.rc",
                "workload.rc",
                "kill.rc",
                "restart.rc",
                "restart-up.rc",
                "stop.rc",
                "shadow-report.rc",
                "loaded-after-stop.count",
            ] {
                d.put(rc, "0\n");
            }
            d.put("up.json", &vector("1"));
            d.put("prom-before.json", &vector("0"));
            d.put("prom-after.json", &vector("16384"));
            d.put("vmstat-before.txt", "2577\n");
            d.put("vmstat-before2.txt", "2577\n");
            d.put("vmstat-after.txt", "18961\n");
            d.put("vmstat-after2.txt", "18961\n");
            d.put(
                "journal-warning.txt",
                &format!("Dec 06 numatrace-vm numatrace[379]: {PROBE_WARNING} (decisions: 1)\n"),
            );
            d.put(
                "security.txt",
                "→ Overall exposure level for numatrace-export.service: 3.9 OK :-)\n",
            );
            d.put("pid-before-kill.txt", "379\n");
            d.put("pid-after-restart.txt", "402\n");
            d.put("state-after-stop.txt", "");
            d.put(
                "shadow-modes.txt",
                "700 root /var/lib/numatrace\n644 root /var/lib/numatrace/shadow-1.json\n\
                 600 root /var/lib/numatrace/shadow-1.trace\n",
            );
            d.put("shadow-report.json", "{}");
            d
        }

        fn put(&self, name: &str, body: &str) {
            std::fs::write(self.0.join(name), body).expect("write");
        }

        fn check(&self) -> Result<()> {
            check(&self.0, "", Series::V6_12)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_passing_run_passes_and_each_broken_part_fails() {
        Dir::passing().check().expect("pass");
        for (file, body) in [
            ("apt.rc", "100\n"),
            ("exporter-up.rc", "1\n"),
            ("prom-after.json", r#"{"status":"success","data":{"result":[]}}"#),
            ("vmstat-after.txt", "30000\n"),
            ("journal-warning.txt", "-- No entries --\n"),
            ("security.txt", "\n"),
            ("pid-after-restart.txt", "379\n"),
            ("loaded-after-stop.count", "3\n"),
            ("state-after-stop.txt", "/run/numatrace/promoter.json\n"),
            ("shadow-report.rc", "1\n"),
            (
                "shadow-modes.txt",
                "755 root /var/lib/numatrace\n644 root /var/lib/numatrace/s.json\n600 root /var/lib/numatrace/s.trace\n",
            ),
            (
                "shadow-modes.txt",
                "700 root /var/lib/numatrace\n644 root /var/lib/numatrace/s.json\n644 root /var/lib/numatrace/s.trace\n",
            ),
            (
                "shadow-modes.txt",
                "700 root /var/lib/numatrace\n666 root /var/lib/numatrace/s.json\n600 root /var/lib/numatrace/s.trace\n",
            ),
            ("shadow-modes.txt", "700 root /var/lib/numatrace\n"),
        ] {
            let d = Dir::passing();
            d.put(file, body);
            assert!(d.check().is_err(), "{file} = {body:?} passed");
        }
    }

    #[test]
    fn reads_an_instant_vector() {
        let v: Value = serde_json::from_str(
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"numatrace"},"value":[12.5,"1"]}]}}"#,
        )
        .expect("json");
        assert_eq!(instant_value(&v).expect("one value"), 1.0);
        let empty: Value =
            serde_json::from_str(r#"{"status":"success","data":{"result":[]}}"#).expect("json");
        assert!(instant_value(&empty).is_err());
    }
}
