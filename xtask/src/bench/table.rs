//! `cargo xtask bench table`: the results table of the pghot RFC (v3) on
//! the test bed.
use std::path::Path;

use anyhow::{Context, Result};

use crate::results::read_report;
use numa_core::workload::Summary;
use numa_promote::PromoteReport;

/// Nanoseconds of workload time per access (lower is better).
fn ns_per_access(w: &Summary) -> f64 {
    w.score_us as f64 * 1000.0 / w.accesses.max(1) as f64
}

/// `cargo xtask bench table`: the results table of the pghot RFC (v3) on
/// the test bed, in one boot: the same hot-chunks run with DRAM filled,
/// (a) numa_balancing=0, (b) =2, (c) =2 plus `numatrace promote`.
pub(crate) fn script() -> String {
    let w = "numatrace workload hot-chunks --slow-mb 128 --chunk-mb 8 --accesses 20000 --idle-ms 100 --duration 30 --seed 1";
    format!(
        r#"cd /results
numatrace workload hot-chunks --dram-mb 1400 --slow-mb 0 --duration 900 > filler.json &
filler=$!
i=0
while [ $i -lt 240 ] && [ "$(awk '/VmRSS/ {{print $2}}' /proc/$filler/status)" -lt 1400000 ]; do sleep 0.5; i=$((i + 1)); done
sleep 2
vm() {{ cat /proc/sys/vm/stat_refresh > /dev/null; grep -E '^(pgpromote_success|pgdemote_kswapd|pgdemote_direct) ' /proc/vmstat > "$1"; }}
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
# Attached once its state file names its pid.
while [ $i -lt 240 ] && ! grep -q "\"pid\": *$p[^0-9]" /run/numatrace/promoter.json 2>/dev/null; do sleep 0.5; i=$((i + 1)); done
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

pub(crate) fn report(dir: &Path) -> Result<()> {
    let moved = read_report::<PromoteReport>(dir, "promote.json")?.moved_pages;
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
        let w: Summary = read_report(dir, &format!("{run}.json"))?;
        let ns = ns_per_access(&w);
        let b = *base.get_or_insert(ns);
        println!(
            "{:<16} {:>10.1} {:>7.1}% {:>12} {:>18} {:>16} {:>9} {:>14}",
            name,
            ns,
            (ns / b - 1.0) * 100.0,
            w.accesses,
            vmstat_delta(dir, run, &["pgpromote_success"])?,
            moved.map_or("-".to_owned(), |m| m.to_string()),
            vmstat_delta(dir, run, &["pgdemote_kswapd", "pgdemote_direct"])?,
            w.slow_pages_on_dram_node_at_end.unwrap_or(0),
        );
    }
    println!("{}", "-".repeat(110));
    Ok(())
}
