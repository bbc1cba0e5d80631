//! `cargo xtask bench production`: what numatrace costs a workload shaped
//! like the seed microbenchmark rather than like the fault path: DRAM
//! filled by another process, 64 MiB on the slow node read at random,
//! computing between the accesses, so hint faults are a small share of its
//! time. Each round runs the same fixed work (a number of chunk visits,
//! each a fixed amount of computing) bare and under `stats --live`,
//! `shadow` and `export`, order rotating, in one boot.
//!
//! Like `overhead`, the guest runs in QEMU's instruction-count mode on one
//! vCPU: its clock counts executed guest instructions, so elapsed and CPU
//! times are instruction counts, independent of the host's load. With one
//! vCPU numatrace's own userspace takes its instructions from the
//! workload's, so the elapsed time is the end-to-end cost on a machine
//! with no idle core; the workload's CPU time is the cost its own faults
//! carry (the probes).
use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use super::{num, rotated, round_runs, Spread};

pub(crate) const ROUNDS: usize = 3;
/// See [`super::overhead::CPUS`].
pub(crate) const CPUS: u32 = 1;

/// The fixed work: 200 visits of 160 random reads and 50 ms of computing.
const WORKLOAD: &str = "numatrace workload hot-chunks --slow-mb 64 --chunk-mb 64 \
    --accesses 160 --compute-ms 50 --visits 200 --max-duration 600";

/// Run name and the numatrace command in front of the workload (none for
/// the base run). `export` keeps serving after its command exits, until
/// Ctrl-C.
const RUNS: [(&str, &str); 4] = [
    ("base", ""),
    ("stats", "numatrace stats --live --json --"),
    ("shadow", "numatrace shadow --json -o /tmp/tool.json --"),
    ("export", "numatrace export --listen 127.0.0.1:9464 --"),
];

pub(crate) fn script() -> String {
    let mut s = String::from(concat!(
        "echo 2 > /proc/sys/kernel/numa_balancing\ncd /results\nexport TERM=dumb\n",
        fill_dram!(36000, 1200)
    ));
    for i in 0..ROUNDS {
        for (name, tool) in rotated(&RUNS, i) {
            let summary = format!("{name}_{i}.json");
            let run = format!("{tool} {WORKLOAD} --seed {i} --summary {summary}");
            if name == "export" {
                // The summary is renamed into place when the workload ends.
                s.push_str(&format!(
                    "{run} 2> /tmp/export.err &\nexporter=$!\n\
                     while [ ! -e {summary} ] && kill -0 $exporter 2>/dev/null; do sleep 1; done\n\
                     kill -INT $exporter; wait $exporter\n\
                     [ -e {summary} ] || {{ cat /tmp/export.err; exit 1; }}\n"
                ));
            } else {
                s.push_str(&format!("{run} > /dev/null || exit 1\n"));
            }
        }
    }
    s.push_str("kill $filler\n");
    s
}

/// The workload's elapsed and CPU time, in guest ms (millions of
/// instructions), and its hint faults.
fn times(w: &Value) -> Result<(f64, f64, f64)> {
    Ok((
        num(w, "elapsed_s")? * 1000.0,
        num(w, "user_ms")? + num(w, "sys_ms")?,
        num(w, "numa_hint_faults")?,
    ))
}

pub(crate) fn report(dir: &Path) -> Result<()> {
    println!("round | run: elapsed M instructions, CPU M instructions, hint faults");
    let mut elapsed: Vec<Vec<f64>> = vec![Vec::new(); RUNS.len() - 1];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); RUNS.len() - 1];
    let mut base_faults = Vec::new();
    for i in 0..ROUNDS {
        let runs = round_runs(dir, &RUNS, i)?;
        let (be, bc, bf) = times(&runs[0])?;
        base_faults.push(bf);
        let mut line = format!("{i:>5} | base {be:.0} {bc:.0} {bf:.0}");
        for (k, run) in runs[1..].iter().enumerate() {
            let (e, c, f) = times(run)?;
            elapsed[k].push(e / be - 1.0);
            cpu[k].push(c / bc - 1.0);
            line.push_str(&format!(" | {} {e:.0} {c:.0} {f:.0}", RUNS[k + 1].0));
        }
        println!("{line}");
    }
    println!();
    println!(
        "slowdown against the bare run of the same round (medians over {ROUNDS} rounds, min and max); base hint faults {:.0}:",
        Spread::of(&base_faults)
    );
    for (k, (name, _)) in RUNS[1..].iter().enumerate() {
        let pct = |v: &[f64]| Spread::of(&v.iter().map(|x| 100.0 * x).collect::<Vec<_>>());
        println!(
            "  {name:<7} elapsed {:.2} %, workload CPU {:.2} %",
            pct(&elapsed[k]),
            pct(&cpu[k])
        );
    }
    println!("(instructions under QEMU's instruction-count mode, not native nanoseconds)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_of_every_round_writes_its_summary() {
        let s = script();
        for i in 0..ROUNDS {
            for (name, _) in RUNS {
                assert!(
                    s.contains(&format!("--summary {name}_{i}.json")),
                    "{name}_{i}"
                );
            }
        }
        // The exporter is stopped once per round, after its workload.
        assert_eq!(s.matches("numatrace export").count(), ROUNDS);
        assert_eq!(s.matches("kill -INT $exporter").count(), ROUNDS);
    }
}
