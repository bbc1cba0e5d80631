//! `cargo xtask bench overhead`: the probes' cost, measured side by side in
//! one VM boot. The same hint-fault-bound workload runs alternately without
//! and with `numatrace stats --live --bpf-stats` attached; the report gives
//! the slowdown ratio (median and spread over the pairs), hint faults/s,
//! ring drops, and the BPF programs' own run time per hint fault.
use std::path::Path;

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use crate::checks::read_json;

pub const PAIRS: usize = 5;

/// One run: 128 MiB on the slow node, touched at random, 6 s; every page
/// takes a hint fault once the scanner protects it (free DRAM: promoted).
const WORKLOAD: &str =
    "numatrace workload hot-chunks --slow-mb 128 --chunk-mb 128 --accesses 100000 --duration 6";

pub fn overhead_script() -> String {
    let mut s = String::from("echo 2 > /proc/sys/kernel/numa_balancing\ncd /results\n");
    for i in 0..PAIRS {
        // Alternate the order so drift (page cache, scanner state) cancels.
        let base = format!("{WORKLOAD} --seed {i} --summary base_{i}.json || exit 1\n");
        let traced = format!(
            "numatrace stats --live --bpf-stats --json -- {WORKLOAD} --seed {i} --summary traced_{i}.json > stats_{i}.json || exit 1\n"
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
    let mut ratios = Vec::new();
    let mut faults_per_s = Vec::new();
    let mut bpf_ns_per_fault = Vec::new();
    let mut drops = 0u64;
    println!(
        "pair  base ns/access  traced ns/access  ratio   hint faults  faults/s   BPF ns/fault"
    );
    for i in 0..PAIRS {
        let base = read_json(dir, &format!("base_{i}.json"))?;
        let traced = read_json(dir, &format!("traced_{i}.json"))?;
        let stats = read_json(dir, &format!("stats_{i}.json"))?;
        let (b, t) = (ns_per_access(&base)?, ns_per_access(&traced)?);
        let faults = stats["hint_faults"].as_u64().unwrap_or(0);
        let secs = num(&stats, "duration_s")?;
        drops += stats["drops"].as_u64().unwrap_or(0);
        let bpf_ns: f64 = stats["bpf_programs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["run_time_ns"].as_f64())
            .sum();
        let per_fault = if faults > 0 {
            bpf_ns / faults as f64
        } else {
            f64::NAN
        };
        println!(
            "{i:>4}  {b:>14.1}  {t:>16.1}  {:>5.3}  {faults:>11}  {:>8.0}  {per_fault:>12.0}",
            t / b,
            faults as f64 / secs
        );
        ratios.push(t / b);
        faults_per_s.push(faults as f64 / secs);
        bpf_ns_per_fault.push(per_fault);
    }
    ensure!(!ratios.is_empty(), "no runs");
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(*r), h.max(*r)));
    println!();
    println!(
        "slowdown (traced/base time per access): median {:.3}, min {:.3}, max {:.3} over {} pairs",
        median(&mut ratios.clone()),
        lo,
        hi,
        ratios.len()
    );
    println!(
        "hint faults/s with numatrace attached: median {:.0}",
        median(&mut faults_per_s)
    );
    println!(
        "BPF run time per hint fault (all programs): median {:.0} ns",
        median(&mut bpf_ns_per_fault)
    );
    println!("ring buffer drops: {drops}");
    println!("(QEMU TCG: absolute times are emulated; the ratio and the per-fault BPF cost are what carry over)");
    Ok(())
}
