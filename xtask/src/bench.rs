//! `cargo xtask bench overhead`: the probes' cost, measured side by side in
//! one VM boot. Each round runs the same hint-fault-bound workload four
//! ways, order rotating: bare (`base`); under `numatrace stats --live
//! --empty-programs` (`empty`: programs that do nothing at the same hooks,
//! the cost of attaching at all); under `numatrace stats --live` at its
//! defaults (`traced`); and the same with `--bpf-stats` (`stats`: the kernel's
//! per-program run time, which itself costs two clock reads per program run,
//! so the slowdown is taken from `traced`). The report gives, over the
//! rounds (median, min, max):
//!
//! - the workload slowdown of `empty`, `traced` and `stats`: the base run's
//!   CPU time with its hint faults at the run's system time per fault, over
//!   the base run's CPU time (see [`same_work_ratio`]); the target is on
//!   `traced`;
//! - the fault-path cost: the workload's system time per hint fault;
//! - from `stats`: each program's run time per hint fault and the BPF share
//!   of the workload's CPU time;
//! - hint faults/s, ring drops, and the guest's busy CPU (numatrace's own
//!   userspace included).
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use crate::checks::read_json;

pub const ROUNDS: usize = 6;

/// One vCPU. The test bed runs all vCPUs on one host thread (TCG
/// thread=single), switching between busy vCPUs every 100 ms; a guest with
/// two sees time pass on the workload's CPU while the host emulates
/// numatrace's reader on the other, and bills it to the workload. On one
/// vCPU the guest scheduler runs them in turn and bills each its own time.
pub const OVERHEAD_CPUS: u32 = 1;

/// One run: 128 MiB on the slow node, touched at random; every page takes
/// a hint fault once the scanner protects it (free DRAM: promoted). A run
/// lasts until 24000 hint faults (of 32768 pages) have been taken, not a
/// fixed time: whether the scanner's one burst of faults fell inside a
/// fixed window decided a run's speed more than the probes did.
const WORKLOAD: &str = "numatrace workload hot-chunks --slow-mb 128 --chunk-mb 128 --accesses 100000 --duration 2 --min-faults 24000 --max-duration 120";

/// The four ways a round runs the workload: name and the numatrace command
/// in front of it (none for the base run).
const OVERHEAD_RUNS: [(&str, &str); 4] = [
    ("base", ""),
    ("empty", "numatrace stats --live --empty-programs --json --"),
    ("traced", "numatrace stats --live --json --"),
    ("stats", "numatrace stats --live --bpf-stats --json --"),
];

pub fn overhead_script() -> String {
    let mut s = String::from("echo 2 > /proc/sys/kernel/numa_balancing\ncd /results\n");
    for i in 0..ROUNDS {
        // Rotate the order so drift (page cache, scanner state) cancels.
        // /proc/stat's first line around each run: the guest's busy CPU.
        for k in 0..OVERHEAD_RUNS.len() {
            let (name, tool) = OVERHEAD_RUNS[(i + k) % OVERHEAD_RUNS.len()];
            let run = format!("{name}_{i}");
            let out = if tool.is_empty() {
                String::new()
            } else {
                format!(" > tool_{run}.json")
            };
            s.push_str(&format!(
                "head -1 /proc/stat > cpu_{run}_0.txt\n{tool} {WORKLOAD} --seed {i} --summary {run}.json{out} || exit 1\nhead -1 /proc/stat > cpu_{run}_1.txt\n"
            ));
        }
    }
    s
}

fn num(v: &Value, key: &str) -> Result<f64> {
    v[key]
        .as_f64()
        .with_context(|| format!("{key} missing in {v}"))
}

/// Nanoseconds of workload time per access (lower is better).
fn ns_per_access(w: &Value) -> Result<f64> {
    Ok(num(w, "score_us")? * 1000.0 / num(w, "accesses")?.max(1.0))
}

/// The workload's system time per hint fault, in µs.
fn sys_us_per_fault(w: &Value) -> Result<f64> {
    Ok(num(w, "sys_ms")? * 1000.0 / num(w, "numa_hint_faults")?.max(1.0))
}

/// The base run's CPU time with its system time per hint fault replaced by
/// `run`'s, over the base run's CPU time: the workload's slowdown for the
/// same work. The probes run only in the kernel, so only the system side is
/// taken from `run`; the user side is not comparable between runs (the
/// accesses made while waiting for the scanner, and their cost per access
/// under TCG, swing 3-5x between runs of the same build, probes or not).
fn same_work_ratio(base: &Value, run: &Value) -> Result<f64> {
    let (ub, sb) = (num(base, "user_ms")?, num(base, "sys_ms")?);
    let faults = num(base, "numa_hint_faults")?;
    Ok((ub + faults * sys_us_per_fault(run)? / 1000.0) / (ub + sb).max(1e-9))
}

/// Busy CPU seconds of the guest between two `/proc/stat` "cpu" lines
/// (user nice system idle iowait irq softirq steal, in USER_HZ = 100).
fn busy_cpu_s(dir: &Path, run: &str) -> Result<f64> {
    let read = |n: u32| -> Result<f64> {
        let path = dir.join(format!("cpu_{run}_{n}.txt"));
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("no {}", path.display()))?;
        let f: Vec<f64> = text
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        ensure!(
            f.len() >= 7,
            "{} is not a /proc/stat cpu line",
            path.display()
        );
        let idle = f[3] + f[4];
        Ok(f.iter().take(8).sum::<f64>() - idle)
    };
    Ok((read(1)? - read(0)?) / 100.0)
}

/// Round `i`'s result of each run, `<name>_<i>.json`, in `runs`' order.
fn round_runs(dir: &Path, runs: &[(&str, &str)], i: usize) -> Result<Vec<Value>> {
    runs.iter()
        .map(|(name, _)| read_json(dir, &format!("{name}_{i}.json")))
        .collect()
}

/// Median, min and max.
#[derive(Clone, Copy)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(v: &[f64]) -> Spread {
        let mut v = v.to_vec();
        let median = median(&mut v);
        Spread {
            median,
            min: v.first().copied().unwrap_or(f64::NAN),
            max: v.last().copied().unwrap_or(f64::NAN),
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = f.precision().unwrap_or(3);
        write!(
            f,
            "median {:.p$} (min {:.p$}, max {:.p$})",
            self.median, self.min, self.max
        )
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn report(dir: &Path) -> Result<()> {
    let tools = &OVERHEAD_RUNS[1..];
    let mut same_work: Vec<Vec<f64>> = vec![Vec::new(); tools.len()];
    let mut sys_us: Vec<Vec<f64>> = vec![Vec::new(); OVERHEAD_RUNS.len()];
    let mut busy: Vec<Vec<f64>> = vec![Vec::new(); OVERHEAD_RUNS.len()];
    let mut faults_per_s = Vec::new();
    let mut bpf_ns_per_fault = Vec::new();
    let mut bpf_share = Vec::new();
    let mut per_program: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut drops = 0u64;
    println!("round | same-work CPU / base: empty  traced  stats | sys us/fault: base  empty traced  stats | traced faults/s | BPF ns/fault  % of CPU | guest busy CPU s: base empty traced stats");
    for i in 0..ROUNDS {
        let runs = round_runs(dir, &OVERHEAD_RUNS, i)?;
        let base = &runs[0];
        let mut line = format!("{i:>5} |");
        for (k, run) in runs[1..].iter().enumerate() {
            let r = same_work_ratio(base, run)?;
            same_work[k].push(r);
            line.push_str(&format!(" {r:>6.3}"));
        }
        line.push_str(" |");
        for (k, run) in runs.iter().enumerate() {
            let us = sys_us_per_fault(run)?;
            sys_us[k].push(us);
            line.push_str(&format!(" {us:>6.1}"));
        }
        let traced = read_json(dir, &format!("tool_traced_{i}.json"))?;
        let stats = read_json(dir, &format!("tool_stats_{i}.json"))?;
        for t in [&traced, &stats] {
            drops += t["drops"].as_u64().unwrap_or(0);
        }
        let fps = traced["hint_faults"].as_f64().unwrap_or(0.0) / num(&traced, "duration_s")?;
        faults_per_s.push(fps);
        let faults = stats["hint_faults"].as_u64().unwrap_or(0).max(1) as f64;
        let mut bpf_ns = 0.0;
        for p in stats["bpf_programs"].as_array().into_iter().flatten() {
            let ns = p["run_time_ns"].as_f64().unwrap_or(0.0);
            bpf_ns += ns;
            if let Some(name) = p["name"].as_str() {
                per_program
                    .entry(name.to_owned())
                    .or_default()
                    .push(ns / faults);
            }
        }
        let stats_run = &runs[3];
        let cpu_ns = (num(stats_run, "user_ms")? + num(stats_run, "sys_ms")?) * 1e6;
        let share = 100.0 * bpf_ns / cpu_ns.max(1.0);
        bpf_ns_per_fault.push(bpf_ns / faults);
        bpf_share.push(share);
        line.push_str(&format!(
            " | {fps:>15.0} | {:>12.0} {share:>8.1} |",
            bpf_ns / faults
        ));
        for (k, (name, _)) in OVERHEAD_RUNS.iter().enumerate() {
            let b = busy_cpu_s(dir, &format!("{name}_{i}"))?;
            busy[k].push(b);
            line.push_str(&format!(" {b:>5.2}"));
        }
        println!("{line}");
    }
    println!();
    println!("BPF run time per hint fault, by program (ns, `stats` runs; all of a program's runs / hint faults):");
    for (name, v) in &per_program {
        println!("  {name:<22} {:.0}", Spread::of(v));
    }
    println!();
    println!("over {ROUNDS} rounds:");
    let labels = [
        "empty programs at the same hooks (the floor)",
        "numatrace at its defaults (target <= 1.050)",
        "numatrace with --bpf-stats",
    ];
    println!("  workload slowdown, CPU time for the same work / base:");
    for (label, v) in labels.iter().zip(&same_work) {
        println!("    {label:<46} {}", Spread::of(v));
    }
    println!("  system time per hint fault (us):");
    for ((name, _), v) in OVERHEAD_RUNS.iter().zip(&sys_us) {
        println!("    {name:<46} {:.1}", Spread::of(v));
    }
    println!(
        "  BPF run time per hint fault (ns, all programs):  {:.0}",
        Spread::of(&bpf_ns_per_fault)
    );
    println!(
        "  BPF share of the workload's CPU time (%):        {:.1}",
        Spread::of(&bpf_share)
    );
    println!(
        "  hint faults/s with numatrace attached:           {:.0}",
        Spread::of(&faults_per_s)
    );
    println!("  guest busy CPU s (workload + numatrace's userspace):");
    for ((name, _), v) in OVERHEAD_RUNS.iter().zip(&busy) {
        println!("    {name:<46} {:.2}", Spread::of(v));
    }
    println!("  ring buffer drops (traced and stats runs; target 0): {drops}");
    println!("(QEMU TCG, one vCPU: the kernel and the JITed BPF are both emulated, so absolute");
    println!(" times are not a real machine's. This workload does nothing but take hint faults,");
    println!(" so its slowdown is the worst case; `empty` is what any tool attached at these");
    println!(" hooks pays before its programs do anything.)");
    Ok(())
}

/// `cargo xtask bench promote`: rounds of `numatrace workload move-pages`
/// on the same 192 MiB page set: the baseline (one move_pages call), the
/// mover at the default `--batch-ms 20` and at `--batch-ms 100`, order
/// rotating; numa_balancing off so the kernel moves nothing itself.
/// Eight rounds: on a shared host one round's ratio swings by 2x.
pub const PROMOTE_ROUNDS: usize = 8;

const MOVE_RUNS: [(&str, &str); 3] = [
    ("base", "--via baseline"),
    ("mover20", "--via mover --rate-limit 0 --batch-ms 20"),
    ("mover100", "--via mover --rate-limit 0 --batch-ms 100"),
];

pub fn promote_script() -> String {
    let mut s = String::from("echo 0 > /proc/sys/kernel/numa_balancing\ncd /results\n");
    for i in 0..PROMOTE_ROUNDS {
        for k in 0..MOVE_RUNS.len() {
            let (name, args) = MOVE_RUNS[(i + k) % MOVE_RUNS.len()];
            s.push_str(&format!(
                "numatrace workload move-pages --mb 192 {args} > {name}_{i}.json || exit 1\n"
            ));
        }
    }
    s
}

pub fn promote_report(dir: &Path) -> Result<()> {
    let mut ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    println!("round  baseline MB/s pages/s | mover 20 ms MB/s pages/s calls ratio | mover 100 ms MB/s pages/s calls ratio");
    for i in 0..PROMOTE_ROUNDS {
        let runs = round_runs(dir, &MOVE_RUNS, i)?;
        for ((name, _), v) in MOVE_RUNS.iter().zip(&runs) {
            ensure!(
                v["moved"] == v["pages"] && v["on_dram_after"] == v["pages"],
                "{name} run {i} did not move every page: {v}"
            );
        }
        let base = num(&runs[0], "mb_per_s")?;
        let mut line = format!(
            "{i:>5}  {base:>13.1} {:>7.0}",
            num(&runs[0], "pages_per_s")?
        );
        for (k, m) in runs[1..].iter().enumerate() {
            let r = num(m, "mb_per_s")? / base;
            ratios[k].push(r);
            line.push_str(&format!(
                " | {:>16.1} {:>7.0} {:>5} {r:>5.3}",
                num(m, "mb_per_s")?,
                num(m, "pages_per_s")?,
                num(m, "calls")?
            ));
        }
        println!("{line}");
    }
    println!();
    for (k, label) in ["--batch-ms 20 (default)", "--batch-ms 100"]
        .iter()
        .enumerate()
    {
        let med = median(&mut ratios[k]);
        println!(
            "mover {label} / baseline throughput: median {med:.3} over {PROMOTE_ROUNDS} rounds (target >= 0.80): {}",
            if med >= 0.8 { "ok" } else { "below target" }
        );
    }
    println!("(QEMU TCG: absolute MB/s are emulated; each batch pays a fixed cost of a few ms");
    println!(" here (move_pages' own: lru_cache_disable's RCU grace period and per-CPU drain;");
    println!(" no location query when the target is alone in the top tier, node meminfo read");
    println!(" at most every 200 ms far from the floor), which longer batches amortise)");
    Ok(())
}

/// `cargo xtask bench table`: the seeds' table (pghot-v3-results.txt) on
/// the test bed, in one boot: the same hot-chunks run with DRAM filled,
/// (a) numa_balancing=0, (b) =2, (c) =2 plus `numatrace promote`.
pub fn table_script() -> String {
    let w = "numatrace workload hot-chunks --slow-mb 128 --chunk-mb 8 --accesses 20000 --idle-ms 100 --duration 30 --seed 1";
    format!(
        r#"cd /results
numatrace workload hot-chunks --dram-mb 1400 --slow-mb 0 --duration 900 > filler.json &
filler=$!
i=0
while [ $i -lt 240 ] && [ "$(awk '/VmRSS/ {{print $2}}' /proc/$filler/status)" -lt 1400000 ]; do sleep 0.5; i=$((i + 1)); done
sleep 2
vm() {{ grep -E '^(pgpromote_success|pgdemote_kswapd|pgdemote_direct) ' /proc/vmstat > "$1"; }}
echo 0 > /proc/sys/kernel/numa_balancing
vm a0.txt; {w} --summary a.json || exit 1; vm a1.txt
echo 2 > /proc/sys/kernel/numa_balancing
vm b0.txt; {w} --summary b.json || exit 1; vm b1.txt
# 0 -> 2 again resets the kernel's adaptive hot threshold (reset_memory_tiering),
# so (c) starts from the same kernel state as (b).
echo 0 > /proc/sys/kernel/numa_balancing
echo 2 > /proc/sys/kernel/numa_balancing
# --all: the workload is started exactly like (a) and (b), in the
# foreground; the filler (idle, on DRAM) has no slow pages to promote.
numatrace promote --all --duration 600 --json -o promote.json 2> promote.err &
p=$!
i=0
while [ $i -lt 240 ] && ! grep -q 'Ctrl-C stops' promote.err; do sleep 0.5; i=$((i + 1)); done
vm c0.txt; {w} --summary c.json || exit 1; vm c1.txt
kill -INT $p; wait $p || exit 1
kill $filler
"#
    )
}

fn vmstat_delta(dir: &Path, run: &str, keys: &[&str]) -> Result<u64> {
    let read = |n: &str| -> Result<std::collections::BTreeMap<String, u64>> {
        let path = dir.join(format!("{run}{n}.txt"));
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("no {}", path.display()))?;
        Ok(text
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_owned(), v.trim().parse().ok()?))
            })
            .collect())
    };
    let (a, b) = (read("0")?, read("1")?);
    Ok(keys
        .iter()
        .map(|k| {
            b.get(*k)
                .copied()
                .unwrap_or(0)
                .saturating_sub(a.get(*k).copied().unwrap_or(0))
        })
        .sum())
}

pub fn table_report(dir: &Path) -> Result<()> {
    let p = read_json(dir, "promote.json")?;
    let moved = p["moved_pages"].as_u64().unwrap_or(0);
    let rows = [
        ("NUMAB0", "a", None),
        ("NUMAB2", "b", None),
        ("NUMAB2+promote", "c", Some(moved)),
    ];
    println!("Benchmark score: busy time per access (ns, lower is better), hot-chunks 128 MiB");
    println!("on the slow node, 30 s, DRAM filled by an idle 1400 MiB process; QEMU TCG test bed");
    println!();
    println!(
        "{:<16} {:>10} {:>8} {:>12} {:>18} {:>16} {:>9} {:>14}",
        "Source",
        "ns/access",
        "Change",
        "accesses",
        "pgpromote_success",
        "numatrace moved",
        "pgdemote",
        "pages on DRAM"
    );
    println!("{}", "-".repeat(110));
    let mut base = None;
    for (name, run, moved) in rows {
        let w = read_json(dir, &format!("{run}.json"))?;
        let ns = ns_per_access(&w)?;
        let b = *base.get_or_insert(ns);
        println!(
            "{:<16} {:>10.1} {:>7.1}% {:>12} {:>18} {:>16} {:>9} {:>14}",
            name,
            ns,
            (ns / b - 1.0) * 100.0,
            w["accesses"].as_u64().unwrap_or(0),
            vmstat_delta(dir, run, &["pgpromote_success"])?,
            moved.map_or("-".to_owned(), |m| m.to_string()),
            vmstat_delta(dir, run, &["pgdemote_kswapd", "pgdemote_direct"])?,
            w["slow_pages_on_dram_node_at_end"].as_u64().unwrap_or(0),
        );
    }
    println!("{}", "-".repeat(110));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_work_ratio_takes_only_the_system_side_from_the_run() {
        let base = json!({"user_ms": 1000.0, "sys_ms": 1000.0, "numa_hint_faults": 20000.0});
        // 50 us per fault in the base run; 75 us in the run, whose user side
        // (any value) must not matter.
        let run = json!({"user_ms": 123.0, "sys_ms": 1500.0, "numa_hint_faults": 20000.0});
        let r = same_work_ratio(&base, &run).unwrap();
        assert!((r - 1.25).abs() < 1e-9, "{r}");
    }

    /// The report reads exactly the files the script makes: write what the
    /// script names (a run's summary, numatrace's output, /proc/stat lines)
    /// and report on them.
    #[test]
    fn report_reads_what_the_script_writes() {
        let dir = std::env::temp_dir().join(format!("overhead-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = overhead_script();
        let words: Vec<&str> = script.split_whitespace().collect();
        let mut runs = 0;
        for (i, w) in words.iter().enumerate() {
            let Some(next) = words.get(i + 1) else {
                continue;
            };
            if *w == "--summary" {
                runs += 1;
                let summary = json!({"user_ms": 900.0, "sys_ms": 1500.0,
                    "numa_hint_faults": 30000.0, "accesses": 1e6});
                std::fs::write(dir.join(next), summary.to_string()).unwrap();
            } else if *w == ">" && next.starts_with("tool_") {
                let tool = json!({"hint_faults": 30000, "duration_s": 5.0, "drops": 0,
                    "bpf_programs": [{"name": "fentry_hint_fault", "run_time_ns": 3e7}]});
                std::fs::write(dir.join(next), tool.to_string()).unwrap();
            } else if *w == ">" && next.starts_with("cpu_") {
                let ticks = if next.ends_with("_0.txt") { 100 } else { 400 };
                let line = format!("cpu  {ticks} 0 {ticks} 1000 0 0 0 0 0 0\n");
                std::fs::write(dir.join(next), line).unwrap();
            }
        }
        assert_eq!(runs, ROUNDS * OVERHEAD_RUNS.len());
        report(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
