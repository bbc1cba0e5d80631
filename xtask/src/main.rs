//! `cargo xtask`: numatrace's developer commands. `setup` installs what the
//! others need, `build` makes the static musl binary, `vm` boots the
//! tiered-NUMA QEMU test bed, `demo` shows numatrace in it, and `test` runs
//! everything CI runs.
// Dev-dependencies are for the integration tests and benches.
#![cfg_attr(test, allow(unused_crate_dependencies))]

/// Guest shell lines: an idle `hot-chunks` process holding 1400 MiB of
/// DRAM for `$secs` seconds (its pid in `$filler`), then a wait of at most
/// `$polls` half-seconds until it holds them (TCG takes a while to touch
/// them). A literal, for the scripts that are constants.
macro_rules! fill_dram {
    ($secs:literal, $polls:literal) => {
        concat!(
            "numatrace workload hot-chunks --dram-mb 1400 --slow-mb 0 --duration ",
            $secs,
            " > /dev/null &\nfiller=$!\ni=0\nwhile [ $i -lt ",
            $polls,
            " ] && [ \"$(awk '/VmRSS/ {print $2}' /proc/$filler/status)\" -lt 1400000 ]; do sleep 0.5; i=$((i + 1)); done\n"
        )
    };
}

mod bench;
mod binary;
mod cmd;
mod fuzz;
mod guest_image;
mod host;
mod initramfs;
mod kernels;
mod observer;
mod package;
mod progress;
mod results;
mod setup;
mod test;
mod vm;
mod vmtest;

use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};

use host::Setup;
use kernels::Series;

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
    /// $NUMATRACE_CACHE/kernels (default ~/.cache/numatrace/kernels), the
    /// systemd guest's root disk image in $NUMATRACE_CACHE/images.
    Setup {
        /// Guest kernels to fetch (6.12-rfc: to build, once).
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "6.1,6.12,7,6.12-rfc"
        )]
        kernels: Vec<Series>,
    },
    /// Build numatrace as a static musl binary and print its path.
    Build {
        #[arg(long)]
        release: bool,
    },
    Vm(vm::VmArgs),
    /// Boot the 6.12 test bed: `numatrace doctor`, `shadow` on a workload,
    /// then `numatrace top` live on this terminal.
    Demo,
    /// Run every check CI runs and print a summary (the README's test command).
    Test(test::TestArgs),
    /// Fuzz every parser of outside input (traces, ring records, procfs and
    /// sysfs text, the promoter's state file, model specs) with cargo-fuzz.
    Fuzz(fuzz::FuzzArgs),
    /// A Debian package (target/package/numatrace_VERSION_amd64.deb): the
    /// static binary, man pages, completions and systemd units; then
    /// installed into an empty dpkg root and checked.
    Package,
    /// export, shadow, promote --all and stats together for M minutes under
    /// process churn in the VM; fails on growth, a bad exit or counts that
    /// differ from vmstat (the test suite runs 3 minutes of it).
    Soak {
        #[arg(long, value_enum, default_value = "6.12")]
        kernel: kernels::Series,
        /// Minutes of soak (1 to 1440).
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=1440))]
        minutes: u64,
    },
    /// Benchmarks measured side by side in one VM boot.
    Bench {
        #[arg(value_enum)]
        which: BenchKind,
        /// `top`: seconds to run.
        #[arg(long, default_value_t = 600)]
        seconds: u64,
        /// `rfc`: the kernels to boot (the stock 6.12 gives Default and
        /// Predicted, 6.12-rfc Patched; a column not run shows `-`);
        /// `observer`: the kernels to measure, one boot each.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "6.12,6.12-rfc"
        )]
        kernels: Vec<Series>,
        /// `overhead`: TCG's real-time clock instead of instruction counts
        /// (times then follow the host's load).
        #[arg(long)]
        wall_clock: bool,
        /// One-boot benches: report the results of the last run again
        /// (target/bench/NAME) without booting.
        #[arg(long)]
        report_only: bool,
    },
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum BenchKind {
    /// Probe overhead on a hint-fault-bound workload.
    Overhead,
    /// What `stats --live`, `shadow` and `export` cost a workload shaped
    /// like the seed microbenchmark (computing between slow-tier reads),
    /// in instructions.
    Production,
    /// `numatrace top` CPU and memory on a replayed 200k events/s stream.
    Top,
    /// `numatrace promote`'s mover against one big move_pages call.
    Promote,
    /// The pghot RFC's results table: numa_balancing 0, 2, 2 + `numatrace promote`.
    Table,
    /// The fault-count RFC's table: stock 6.12, the patched kernel, and
    /// numatrace's fault-count shadow of the stock run.
    Rfc,
    /// The seed-style workload run bare, under `stats --live`, under
    /// `--empty-programs`, under `stats --live` with its process stopped
    /// until the workload ends, and beside a busy loop, rotated, in one
    /// instruction-count boot per kernel (`--kernels`): does attaching
    /// change the kernel's hint faults, PTE updates and promotions, and is
    /// it the programs or the reader?
    Observer,
}

/// What `cargo xtask demo` runs in the emulated CXL box: doctor, then the
/// seeds' hot-chunks workload (DRAM filled by a second process) under
/// `numatrace shadow`, whose report compares the kernel with the models,
/// and last `numatrace top` live on the user's terminal (the guest console
/// gets the host's size) until the workload ends.
const DEMO_SCRIPT: &str = r#"echo 2 > /proc/sys/kernel/numa_balancing
numatrace doctor || exit 1
echo; echo '== filling DRAM with an idle 1400 MiB process, then hot-chunks on the slow node for 30 s =='
numatrace workload hot-chunks --dram-mb 1400 --slow-mb 0 --duration 600 > /dev/null &
sleep 8
numatrace shadow --record /results/demo.trace -- numatrace workload hot-chunks --slow-mb 128 --chunk-mb 8 --accesses 20000 --idle-ms 100 --duration 30 --min-faults 10000 --max-duration 180 --summary /results/workload.json
echo; echo '== the same recording, replayed with a fault-count threshold sweep =='
numatrace replay /results/demo.trace --sweep threshold=1e2,1e3,1e4,1e5,1e6
echo; echo '== numatrace top, live, on this terminal (size passed in) while hot-chunks runs for 45 s; it exits with the workload =='
sleep 5
numatrace top -- numatrace workload hot-chunks --slow-mb 128 --chunk-mb 8 --accesses 20000 --idle-ms 100 --duration 45 --min-faults 10000 --max-duration 180 --summary /results/top-workload.json
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

/// Boots the `kernel` test bed once with a benchmark script (the same
/// runner as `cargo xtask vm`); results land in `out`.
fn bench_vm(
    out: &std::path::Path,
    script: &str,
    cpus: u32,
    kernel: Series,
    icount: bool,
    truth: Option<&std::path::Path>,
) -> Result<ExitCode> {
    let cpus = cpus.to_string();
    let out = out.to_string_lossy();
    let truth = truth.map(|t| t.to_string_lossy().into_owned());
    let mut argv = vec![
        "cargo xtask",
        "vm",
        "--kernel",
        kernel.name(),
        "--cpus",
        &cpus,
    ];
    argv.extend(["--timeout", "1800", "--out", &out]);
    if icount {
        argv.push("--icount");
    }
    if let Some(t) = &truth {
        argv.extend(["--truth", t, "--truth-window-ms", bench::rfc::WINDOW_MS]);
    }
    argv.extend(["--", script]);
    run(Cli::parse_from(argv).command)
}

/// `cargo xtask soak`: one boot running the soak for `minutes`, then its
/// check.
fn soak(kernel: kernels::Series, minutes: u64) -> Result<ExitCode> {
    let out = cmd::target_dir().join("soak").join(kernel.to_string());
    let series = kernel.to_string();
    let timeout = (minutes * 60 + 600).to_string();
    let out_arg = out.to_string_lossy();
    let script = vmtest::soak::script(minutes * 60);
    let argv = [
        "cargo xtask",
        "vm",
        "--kernel",
        &series,
        "--timeout",
        &timeout,
    ];
    let code =
        run(Cli::parse_from(argv.into_iter().chain(["--out", &out_arg, "--", &script])).command)?;
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }
    vmtest::soak::check(&out.join("soak"), "", kernel)?;
    println!("soak on {kernel}: PASS ({})", out.display());
    Ok(ExitCode::SUCCESS)
}

fn run(command: Cmd) -> Result<ExitCode> {
    match command {
        Cmd::Setup { kernels } => {
            setup::all(&mut Setup::new(true), &kernels)?;
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
        Cmd::Fuzz(args) => {
            fuzz::run(&args, &mut Setup::new(false))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Soak { kernel, minutes } => soak(kernel, minutes),
        Cmd::Package => {
            let mut setup = Setup::new(false);
            setup.host_packages()?;
            let deb = package::build(&binary::build(true, &mut setup)?)?;
            package::check(&deb)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench {
            which,
            seconds,
            kernels,
            wall_clock,
            report_only,
        } => bench(which, seconds, &kernels, wall_clock, report_only),
    }
}

/// `cargo xtask bench WHICH`.
fn bench(
    which: BenchKind,
    seconds: u64,
    kernels: &[Series],
    wall_clock: bool,
    report_only: bool,
) -> Result<ExitCode> {
    if report_only && matches!(which, BenchKind::Top | BenchKind::Rfc | BenchKind::Observer) {
        bail!("--report-only is for the one-boot benches (promote, table, production, overhead)");
    }
    match which {
        BenchKind::Top => {
            bench::top::run(seconds)?;
            Ok(ExitCode::SUCCESS)
        }
        BenchKind::Promote => one_boot(
            "promote",
            &bench::promote::script(),
            2,
            false,
            report_only,
            &bench::promote::report,
        ),
        BenchKind::Table => one_boot(
            "table",
            &bench::table::script(),
            2,
            false,
            report_only,
            &bench::table::report,
        ),
        BenchKind::Rfc => bench_rfc(kernels),
        BenchKind::Observer => bench_observer(kernels),
        BenchKind::Production => {
            let script = bench::production::script();
            one_boot(
                "production",
                &script,
                bench::production::CPUS,
                true,
                report_only,
                &bench::production::report,
            )
        }
        BenchKind::Overhead => {
            let clock = if wall_clock {
                bench::overhead::Clock::Wall
            } else {
                bench::overhead::Clock::Instructions
            };
            let script = bench::overhead::script();
            one_boot(
                "overhead",
                &script,
                bench::overhead::CPUS,
                !wall_clock,
                report_only,
                &|out| bench::overhead::report(out, clock),
            )
        }
    }
}

/// A bench of one 6.12 boot: its script's results go to
/// `target/bench/NAME`, which `report` then reads (without a boot when
/// `report_only`).
fn one_boot(
    name: &str,
    script: &str,
    cpus: u32,
    icount: bool,
    report_only: bool,
    report: &dyn Fn(&std::path::Path) -> Result<()>,
) -> Result<ExitCode> {
    let out = cmd::target_dir().join("bench").join(name);
    if !report_only {
        let code = bench_vm(&out, script, cpus, Series::V6_12, icount, None)?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    report(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// `cargo xtask bench observer`: one boot per kernel, then each kernel's
/// table.
fn bench_observer(kernels: &[Series]) -> Result<ExitCode> {
    let root = cmd::target_dir().join("bench/observer");
    for series in kernels {
        let out = root.join(series.name());
        let code = bench_vm(
            &out,
            &bench::observer::script(),
            vm::icount_cpus(*series),
            *series,
            true,
            None,
        )?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    for series in kernels {
        bench::observer::report(series.name(), &root.join(series.name()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `cargo xtask bench rfc`: one boot per kernel, then the table.
fn bench_rfc(kernels: &[Series]) -> Result<ExitCode> {
    if let Some(other) = kernels
        .iter()
        .find(|k| !matches!(k, Series::V6_12 | Series::V6_12Rfc))
    {
        anyhow::bail!("bench rfc compares 6.12 and 6.12-rfc; {other} is neither");
    }
    let root = cmd::target_dir().join("bench/rfc");
    let mut dirs = [None, None];
    for (slot, series) in [(0, Series::V6_12), (1, Series::V6_12Rfc)] {
        if !kernels.contains(&series) {
            continue;
        }
        let out = root.join(series.name());
        let truth = out.join(bench::rfc::TRUTH);
        let code = bench_vm(&out, &bench::rfc::script(), 2, series, false, Some(&truth))?;
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
        bench::rfc::replay(&out)?;
        dirs[slot] = Some(out);
    }
    bench::rfc::report(dirs[0].as_deref(), dirs[1].as_deref())?;
    Ok(ExitCode::SUCCESS)
}
