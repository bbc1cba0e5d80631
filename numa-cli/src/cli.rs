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
    /// Run alternative promotion policies in shadow beside the kernel (live).
    Shadow(ShadowArgs),
    /// Run the shadow policies on a recorded trace; sweep a parameter.
    Replay(ReplayArgs),
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
    /// Measure the BPF programs' own run time (kernel BPF stats).
    #[arg(long)]
    pub bpf_stats: bool,
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

/// Shadow policy selection, shared by `shadow` and `replay`.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// Policy to evaluate, repeatable: kernel-time, fault-count, two-touch,
    /// optionally with options: `fault-count:threshold=2e5,counter=global`.
    /// Default: all three with their defaults.
    #[arg(long = "model")]
    pub models: Vec<String>,
    /// fault-count threshold (hint faults between scan and fault); RFC: 1e6.
    #[arg(long)]
    pub threshold: Option<f64>,
    /// fault-count counter: mm (the RFC's per-process) or global.
    #[arg(long)]
    pub counter: Option<String>,
    /// fault-count stamp: first (the kernel's) or latest (the RFC's patch 2/2).
    #[arg(long)]
    pub stamp: Option<String>,
    /// two-touch observation window in ms (default: 2 x hot_threshold_ms).
    #[arg(long)]
    pub window_ms: Option<u64>,
    /// Apply the kernel's promotion rate limit to fault-count too.
    #[arg(long)]
    pub rate_limit: bool,
    /// Processes listed in the report.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Machine-readable output.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// One CSV row per model.
    #[arg(long)]
    pub csv: bool,
    /// Write the report here instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ShadowArgs {
    #[command(flatten)]
    pub models: ModelArgs,
    /// Also print a report every this many seconds.
    #[arg(long)]
    pub interval: Option<f64>,
    /// Also record the evaluated events to this trace file.
    #[arg(long)]
    pub record: Option<PathBuf>,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Trace file from `numatrace record` or `numatrace shadow --record`.
    pub trace: PathBuf,
    #[command(flatten)]
    pub models: ModelArgs,
    /// Sweep a fault-count parameter: `threshold=1e4,1e5,1e6`.
    #[arg(long)]
    pub sweep: Option<String>,
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
    /// MiB allocated on the slow (CPU-less) node and accessed in chunks
    /// (0: only fill DRAM with --dram-mb and hold it for --duration).
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
