//! Command-line interface: plain clap data, no behaviour.
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "numatrace",
    version,
    about = "Shows, and second-guesses, how Linux NUMA balancing promotes hot pages from slow memory"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check prerequisites, print the attach plan, try each probe mechanism.
    Doctor {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Totals: hint faults, decisions by reason, migrations, histograms.
    Stats(StatsArgs),
    /// Record a self-describing trace of every hint fault, scan and skip.
    Record(RecordArgs),
    /// Print every record of a trace as one JSON line.
    Dump {
        /// Trace file from `numatrace record`.
        trace: PathBuf,
    },
    /// Synthetic workloads for trying numatrace (the test bed uses them).
    #[command(subcommand)]
    Workload(Workload),
}

/// Options of every command that attaches the probes.
#[derive(Debug, Args, Clone)]
pub struct ProbeArgs {
    /// Only record events of this process (tgid). Counters stay system-wide.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Only record events of processes in this cgroup (v2 directory).
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// Emit one fault record in N (counters and histograms stay exact).
    #[arg(long, default_value_t = 1)]
    pub sample: u64,
    /// Size of the per-folio stamp map (folios tracked at once).
    #[arg(long, default_value_t = numa_ebpf_common::DEFAULT_STAMP_ENTRIES)]
    pub max_folios: u32,
    /// Ring buffer size in MiB (rounded up to a power of two).
    #[arg(long, default_value_t = 16)]
    pub ring_mb: u32,
    /// Stop after this many seconds (default: when COMMAND exits, else 10 s).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Run this command while attached and stop when it exits.
    #[arg(last = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// A trace recorded with `numatrace record`.
    #[arg(conflicts_with = "live", required_unless_present = "live")]
    pub file: Option<PathBuf>,
    /// Attach the probes to the running kernel instead of reading a trace.
    #[arg(long)]
    pub live: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Also write the evaluated events to this trace file (with --live).
    #[arg(long, requires = "live")]
    pub record: Option<PathBuf>,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Trace file to write.
    #[arg(short, long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Workload {
    /// The seeds' microbenchmark: memory on DRAM and on the slow node, random
    /// 4K accesses to one chunk at a time, idle gaps between chunks.
    HotChunks(HotChunksArgs),
}

#[derive(Debug, Args, Clone)]
pub struct HotChunksArgs {
    /// MiB allocated on the slow (CPU-less) node and accessed in chunks.
    #[arg(long, default_value_t = 256)]
    pub slow_mb: u64,
    /// MiB allocated on the DRAM node and left idle (fills DRAM so promotion
    /// must pass the kernel's hot threshold instead of the free-space shortcut).
    #[arg(long, default_value_t = 0)]
    pub dram_mb: u64,
    /// Chunk size in MiB.
    #[arg(long, default_value_t = 16)]
    pub chunk_mb: u64,
    /// Random page accesses per chunk visit.
    #[arg(long, default_value_t = 20000)]
    pub accesses: u64,
    /// Idle time between chunk visits, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub idle_ms: u64,
    /// Total run time in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Slow node (default: the first CPU-less node).
    #[arg(long)]
    pub slow_node: Option<u32>,
    /// DRAM node (default: the node of CPU 0).
    #[arg(long)]
    pub dram_node: Option<u32>,
    /// Allow transparent huge pages (default: 4K pages via MADV_NOHUGEPAGE).
    #[arg(long)]
    pub thp: bool,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the JSON summary here instead of stdout.
    #[arg(long)]
    pub summary: Option<PathBuf>,
}
