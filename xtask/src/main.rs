//! `cargo xtask`: numatrace's developer commands. `setup` installs what the
//! others need, `build` makes the static musl binary, `vm` boots the
//! tiered-NUMA QEMU test bed, `demo` shows numatrace in it, and `test` runs
//! everything CI runs.

mod bench;
mod binary;
mod checks;
mod cmd;
mod initramfs;
mod kernels;
mod setup;
mod test;
mod vm;
mod vmtest;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use kernels::Series;
use setup::Setup;

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "numatrace developer commands"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Install the toolchain (nightly + rust-src, musl target, bpf-linker),
    /// host packages and guest kernels. Idempotent. Kernels are cached in
    /// $NUMATRACE_CACHE/kernels (default ~/.cache/numatrace/kernels).
    Setup {
        /// Guest kernels to fetch.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "6.1,6.12,7.2"
        )]
        kernels: Vec<Series>,
    },
    /// Build numatrace as a static musl binary and print its path.
    Build {
        #[arg(long)]
        release: bool,
    },
    Vm(vm::VmArgs),
    /// Boot the 6.12 test bed and show `numatrace doctor` in tiering mode.
    Demo,
    /// Run every check CI runs and print a summary (the README's test command).
    Test(test::TestArgs),
    /// Benchmarks measured side by side in one VM boot.
    Bench {
        #[arg(value_enum)]
        which: BenchKind,
    },
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum BenchKind {
    /// Probe overhead on a hint-fault-bound workload (issue: probes).
    Overhead,
}

/// What `cargo xtask demo` runs in the emulated CXL box: doctor, then the
/// seeds' hot-chunks workload (DRAM filled by a second process) under
/// `numatrace shadow`, whose report compares the kernel with the models.
const DEMO_SCRIPT: &str = r#"echo 2 > /proc/sys/kernel/numa_balancing
numatrace doctor || exit 1
echo; echo '== filling DRAM with an idle 1400 MiB process, then hot-chunks on the slow node for 30 s =='
numatrace workload hot-chunks --dram-mb 1400 --slow-mb 0 --duration 600 > /dev/null &
sleep 8
numatrace shadow --record /results/demo.trace -- numatrace workload hot-chunks --slow-mb 128 --chunk-mb 8 --accesses 20000 --idle-ms 100 --duration 30 --summary /results/workload.json
echo; echo '== the same recording, replayed with a fault-count threshold sweep =='
numatrace replay /results/demo.trace --sweep threshold=1e2,1e3,1e4,1e5,1e6
"#;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Cmd) -> Result<ExitCode> {
    match command {
        Cmd::Setup { kernels } => {
            Setup::new(true).all(&kernels)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Build { release } => {
            let path = binary::build(release, &mut Setup::new(false))?;
            println!("{} (static: no ELF interpreter)", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Vm(args) => vm::run(args),
        Cmd::Demo => {
            // The same runner as `cargo xtask vm`, with fixed arguments.
            let cli = Cli::parse_from(["cargo xtask", "vm", "--kernel", "6.12", "--", DEMO_SCRIPT]);
            run(cli.command)
        }
        Cmd::Test(args) => test::run(args),
        Cmd::Bench {
            which: BenchKind::Overhead,
        } => {
            let out = cmd::target_dir().join("bench/overhead");
            let script = bench::overhead_script();
            let cli = Cli::parse_from([
                "cargo xtask",
                "vm",
                "--kernel",
                "6.12",
                "--timeout",
                "900",
                "--out",
                &out.to_string_lossy(),
                "--",
                &script,
            ]);
            let code = run(cli.command)?;
            if code != ExitCode::SUCCESS {
                return Ok(code);
            }
            bench::report(&out)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
