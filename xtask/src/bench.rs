//! `cargo xtask bench overhead`: the probes' cost, measured side by side in
//! one VM boot. The same hint-fault-bound workload runs alternately without
//! and with `numatrace stats --live --bpf-stats` attached. The report gives,
//! over the pairs (median, min, max):
//!
//! - the workload slowdown, as the CPU time the traced run's rates need for
//!   the base run's work (its accesses at the traced user time per access,
//!   its hint faults at the traced system time per fault) over the base
//!   run's CPU time; and as accesses per second (busy time), base / traced,
//!   which also swings with how many fault-free chunk visits came before
//!   the scanner's one burst of faults;
//! - the fault-path cost: the workload's system time per hint fault,
//!   traced / base (hint faults are where the probes run);
//! - the share of the traced workload's CPU time spent in BPF programs
//!   (bpf stats run time / the workload's user + system time), and the
//!   guest's extra busy CPU (BPF, trampolines, numatrace's own userspace);
//! - hint faults/s, ring drops, and each program's run time per hint fault.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use crate::checks::read_json;

pub const PAIRS: usize = 5;

/// One run: 128 MiB on the slow node, touched at random; every page takes
/// a hint fault once the scanner protects it (free DRAM: promoted). A run
/// lasts until 24000 hint faults (of 32768 pages) have been taken, not a
/// fixed time: whether the scanner's one burst of faults fell inside a
/// fixed window decided a run's speed more than the probes did.
const WORKLOAD: &str = "numatrace workload hot-chunks --slow-mb 128 --chunk-mb 128 --accesses 100000 --duration 2 --min-faults 24000 --max-duration 120";

pub fn overhead_script() -> String {
    let mut s = String::from("echo 2 > /proc/sys/kernel/numa_balancing\ncd /results\n");
    for i in 0..PAIRS {
        // Alternate the order so drift (page cache, scanner state) cancels.
        // /proc/stat's first line around each run: the guest's busy CPU.
        let base = format!(
            "head -1 /proc/stat > cpu_base_{i}_0.txt\n{WORKLOAD} --seed {i} --summary base_{i}.json || exit 1\nhead -1 /proc/stat > cpu_base_{i}_1.txt\n"
        );
        let traced = format!(
            "head -1 /proc/stat > cpu_traced_{i}_0.txt\nnumatrace stats --live --bpf-stats --json -- {WORKLOAD} --seed {i} --summary traced_{i}.json > stats_{i}.json || exit 1\nhead -1 /proc/stat > cpu_traced_{i}_1.txt\n"
        );
        if i % 2 == 0 {
            s.push_str(&base);
            s.push_str(&traced);
        } else {
            s.push_str(&traced);
            s.push_str(&base);
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

/// The workload's accesses per second of busy time (higher is better).
fn accesses_per_s(w: &Value) -> Result<f64> {
    Ok(num(w, "accesses")? / (num(w, "score_us")? / 1e6).max(1e-9))
}

/// The workload's system time per hint fault, in µs.
fn sys_us_per_fault(w: &Value) -> Result<f64> {
    Ok(num(w, "sys_ms")? * 1000.0 / num(w, "numa_hint_faults")?.max(1.0))
}

/// The traced run's CPU time for the base run's work, over the base run's
/// CPU time (the workload's own user + system time of its access phase).
fn same_work_ratio(base: &Value, traced: &Value) -> Result<f64> {
    let (ab, fb) = (
        num(base, "accesses")?.max(1.0),
        num(base, "numa_hint_faults")?.max(1.0),
    );
    let (at, ft) = (
        num(traced, "accesses")?.max(1.0),
        num(traced, "numa_hint_faults")?.max(1.0),
    );
    let (ub, sb) = (num(base, "user_ms")?, num(base, "sys_ms")?);
    let (ut, st) = (num(traced, "user_ms")?, num(traced, "sys_ms")?);
    Ok((ab * ut / at + fb * st / ft) / (ub + sb).max(1e-9))
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
    let mut same_work = Vec::new();
    let mut slowdown = Vec::new();
    let mut sys_ratio = Vec::new();
    let mut wall_ratio = Vec::new();
    let mut faults_per_s = Vec::new();
    let mut bpf_ns_per_fault = Vec::new();
    let mut bpf_share = Vec::new();
    let mut extra_cpu = Vec::new();
    let mut per_program: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut drops = 0u64;
    println!("pair  same-work CPU | accesses/s base  traced  slowdown | wall s base traced | sys us/fault base traced ratio | hint faults faults/s | BPF ns/fault  BPF % of workload CPU | guest busy CPU s base traced");
    for i in 0..PAIRS {
        let base = read_json(dir, &format!("base_{i}.json"))?;
        let traced = read_json(dir, &format!("traced_{i}.json"))?;
        let stats = read_json(dir, &format!("stats_{i}.json"))?;
        let (ab, at) = (accesses_per_s(&base)?, accesses_per_s(&traced)?);
        let (wb, wt) = (num(&base, "elapsed_s")?, num(&traced, "elapsed_s")?);
        let (sb, st) = (sys_us_per_fault(&base)?, sys_us_per_fault(&traced)?);
        let faults = stats["hint_faults"].as_u64().unwrap_or(0);
        let secs = num(&stats, "duration_s")?;
        drops += stats["drops"].as_u64().unwrap_or(0);
        let mut bpf_ns = 0.0;
        for p in stats["bpf_programs"].as_array().into_iter().flatten() {
            let ns = p["run_time_ns"].as_f64().unwrap_or(0.0);
            bpf_ns += ns;
            if let Some(name) = p["name"].as_str() {
                per_program
                    .entry(name.to_owned())
                    .or_default()
                    .push(ns / (faults.max(1) as f64));
            }
        }
        let per_fault = bpf_ns / faults.max(1) as f64;
        let workload_cpu_ns = (num(&traced, "user_ms")? + num(&traced, "sys_ms")?) * 1e6;
        let share = 100.0 * bpf_ns / workload_cpu_ns.max(1.0);
        let (cb, ct) = (
            busy_cpu_s(dir, &format!("base_{i}"))?,
            busy_cpu_s(dir, &format!("traced_{i}"))?,
        );
        let sw = same_work_ratio(&base, &traced)?;
        same_work.push(sw);
        println!(
            "{i:>4}  {sw:>13.3} | {ab:>15.0} {at:>7.0} {:>9.3} | {wb:>11.2} {wt:>6.2} | {sb:>21.1} {st:>6.1} {:>5.3} | {faults:>11} {:>8.0} | {per_fault:>12.0} {share:>21.1} | {cb:>24.2} {ct:>6.2}",
            ab / at,
            st / sb,
            faults as f64 / secs
        );
        slowdown.push(ab / at);
        wall_ratio.push(wt / wb);
        sys_ratio.push(st / sb);
        faults_per_s.push(faults as f64 / secs);
        bpf_ns_per_fault.push(per_fault);
        bpf_share.push(share);
        extra_cpu.push(ct / cb.max(1e-9));
    }
    ensure!(!slowdown.is_empty(), "no runs");
    println!();
    println!(
        "BPF run time per hint fault, by program (ns; all of a program's runs / hint faults):"
    );
    for (name, v) in &per_program {
        println!("  {name:<22} {:.0}", Spread::of(v));
    }
    println!();
    println!("over {} pairs:", slowdown.len());
    println!(
        "  workload slowdown, CPU time for the same work (target <= 1.050): {}",
        Spread::of(&same_work)
    );
    println!(
        "  workload slowdown, accesses/s base / traced:                     {}",
        Spread::of(&slowdown)
    );
    println!(
        "  workload wall clock, traced / base:                            {}",
        Spread::of(&wall_ratio)
    );
    println!(
        "  fault-path cost (system time per hint fault, traced / base):   {}",
        Spread::of(&sys_ratio)
    );
    println!(
        "  BPF share of the traced workload's CPU time (%):               {:.1}",
        Spread::of(&bpf_share)
    );
    println!(
        "  guest busy CPU, traced / base (BPF, trampolines, numatrace):   {}",
        Spread::of(&extra_cpu)
    );
    println!(
        "  BPF run time per hint fault (ns, all programs):                {:.0}",
        Spread::of(&bpf_ns_per_fault)
    );
    println!(
        "  hint faults/s with numatrace attached:                         {:.0}",
        Spread::of(&faults_per_s)
    );
    println!("  ring buffer drops (all pairs; target 0):                       {drops}");
    println!("(QEMU TCG: the kernel and the JITed BPF are both emulated, so absolute times are");
    println!(" not a real machine's; the ratios and the BPF share are what carry over. This");
    println!(" workload does nothing but take hint faults, so its slowdown is the worst case.)");
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
        let runs = MOVE_RUNS
            .iter()
            .map(|(name, _)| read_json(dir, &format!("{name}_{i}.json")))
            .collect::<Result<Vec<_>>>()?;
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
