//! `cargo xtask bench observer`: does attaching numatrace change what the
//! kernel's NUMA balancing does? The seed-style workload (DRAM filled by
//! another process, a 256 MiB slow-node region touched in 64 MiB chunks
//! with 4 s idle gaps) runs [`ROUNDS`] times bare and [`ROUNDS`] times
//! under `numatrace record`, alternating, in one boot per kernel. Each run
//! gives its hint faults (vmstat, over its access phase) and the pages of
//! its region found on DRAM at the end (promotions).
//!
//! On the small test bed this workload sits on a cliff: 6.7+ kernels scan
//! a VMA unconditionally only in its first two scan sequences, and
//! whether those come before or after its pages exist decides between no
//! hint fault at all and tens of thousands. So the question is whether
//! the traced runs' spread differs from the bare runs' beyond that
//! run-to-run spread.
use std::path::Path;

use anyhow::Result;

use super::{num, rotated, Spread};
use crate::results::read_json;

pub const ROUNDS: usize = 5;

const WORKLOAD: &str = "numatrace workload hot-chunks --slow-mb 256 --chunk-mb 64 \
    --accesses 20000 --idle-ms 4000 --duration 40";

const RUNS: [(&str, &str); 2] = [
    ("bare", ""),
    (
        "traced",
        "numatrace -q record -o /tmp/observer.trace --overwrite --",
    ),
];

pub fn script() -> String {
    let mut s = String::from(
        "echo 2 > /proc/sys/kernel/numa_balancing\ncd /results\nexport TERM=dumb\n\
         numatrace workload hot-chunks --dram-mb 1400 --slow-mb 0 --duration 3600 > /dev/null &\n\
         sleep 8\n",
    );
    for i in 0..ROUNDS {
        for (name, prefix) in rotated(&RUNS, i) {
            s.push_str(&format!(
                "{prefix} {WORKLOAD} --summary {name}_{i}.json || exit 1\nrm -f /tmp/observer.trace\n"
            ));
        }
    }
    s
}

/// One kernel's runs: hint faults and promotions per run, then their
/// spread bare and traced.
pub fn report(kernel: &str, dir: &Path) -> Result<()> {
    println!("kernel {kernel}: {ROUNDS} runs each, alternating (round i starts with the other kind than round i-1)");
    println!("  run   bare: hint faults  promoted | traced: hint faults  promoted");
    let mut figures: [[Vec<f64>; 2]; 2] = Default::default();
    for i in 0..ROUNDS {
        let mut line = format!("  {i:>3}");
        for (k, (name, _)) in RUNS.iter().enumerate() {
            let v = read_json(dir, &format!("{name}_{i}.json"))?;
            let faults = num(&v, "numa_hint_faults")?;
            let promoted = num(&v, "slow_pages_on_dram_node_at_end")?;
            figures[k][0].push(faults);
            figures[k][1].push(promoted);
            line.push_str(&format!(" | {faults:>19.0} {promoted:>9.0}"));
        }
        println!("{line}");
    }
    for (f, what) in ["hint faults", "pages promoted"].iter().enumerate() {
        let bare = Spread::of(&figures[0][f]);
        let traced = Spread::of(&figures[1][f]);
        let verdict = if traced.median >= bare.min && traced.median <= bare.max {
            "traced median within the bare runs' range"
        } else {
            "traced median OUTSIDE the bare runs' range"
        };
        println!("  {what}: bare {bare:.0}; traced {traced:.0}: {verdict}");
    }
    Ok(())
}
