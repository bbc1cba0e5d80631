//! `cargo xtask test`: everything CI checks, in order, with one summary
//! table at the end: setup, rustfmt, clippy, unit tests, the release musl
//! build, each fuzz target for a short fixed time, then the VM tests (xtask/src/vmtest/) on each guest kernel.
//! A step failing does not stop the later ones (except what depends on it).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::binary;
use crate::cmd;
use crate::host::Setup;
use crate::kernels::{self, Availability, Kernel, Series};
use crate::vmtest;

#[derive(clap::Args, Debug)]
pub(crate) struct TestArgs {
    /// Guest kernels for the VM tests; each Debian one must be fetchable
    /// (or cached). 6.12-rfc is built when missing, except with CI set,
    /// where its tests are skipped.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "6.1,6.12,7,6.12-rfc"
    )]
    pub kernels: Vec<Series>,
    /// Skip the VM tests (and fetching kernels).
    #[arg(long)]
    pub no_vm: bool,
    /// Only judge the results of a hand-run VM test (e.g. its script run
    /// with `cargo xtask vm --out DIR`), for the first of --kernels:
    /// `cargo xtask test --kernels 6.12 --check promote DIR/promote`.
    #[arg(long, num_args = 2, value_names = ["TEST", "DIR"])]
    pub check: Vec<String>,
    /// Fuzzing: a reproducible run of a fixed number of inputs per target,
    /// at most this many seconds each (0: skip fuzzing; at most 86400).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=86400))]
    pub fuzz_time: u64,
    /// Only these VM tests, after the release build and nothing else (no
    /// fmt, clippy, unit tests or fuzzing): for working on one test.
    /// `truth` is the truth plugin's own test, `known` the truth scenario.
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(
        vmtest::TESTS.iter().map(|t| t.name).chain([TRUTH_ONLY, KNOWN_ONLY])))]
    pub only: Vec<String>,
}

#[derive(Clone)]
enum Status {
    Pass,
    Fail(String),
    Skipped(String),
}

struct Step {
    name: String,
    status: Status,
    duration: Duration,
}

#[derive(Default)]
struct Report {
    steps: Vec<Step>,
}

impl Report {
    /// Runs `f` as step `name`, announcing it first.
    fn step<T>(&mut self, name: &str, f: impl FnOnce() -> Result<T>) -> Option<T> {
        println!("\n==> {name}");
        let start = Instant::now();
        let result = f();
        let duration = start.elapsed();
        let (status, value) = match result {
            Ok(v) => (Status::Pass, Some(v)),
            Err(e) => {
                eprintln!("FAIL {name}: {e:#}");
                (Status::Fail(format!("{e:#}")), None)
            }
        };
        self.push(name, status, duration);
        value
    }

    fn push(&mut self, name: &str, status: Status, duration: Duration) {
        self.steps.push(Step {
            name: name.to_string(),
            status,
            duration,
        });
    }

    fn print(&self) -> bool {
        let width = self.steps.iter().map(|s| s.name.len()).max().unwrap_or(0);
        println!("\n==> summary");
        let (mut passed, mut failed, mut skipped) = (0, 0, 0);
        for s in &self.steps {
            let (word, why) = match &s.status {
                Status::Pass => {
                    passed += 1;
                    ("PASS", "")
                }
                Status::Fail(why) => {
                    failed += 1;
                    ("FAIL", why.as_str())
                }
                Status::Skipped(why) => {
                    skipped += 1;
                    ("SKIPPED", why.as_str())
                }
            };
            // Keep the table readable: first line of the reason, shortened.
            let why: String = why.lines().next().unwrap_or("").chars().take(160).collect();
            println!(
                "{:<width$}  {word:<7}  {:>6.1}s  {why}",
                s.name,
                s.duration.as_secs_f64()
            );
        }
        println!("xtask: {passed} passed, {failed} failed, {skipped} skipped");
        failed == 0
    }
}

pub(crate) fn run(args: TestArgs) -> Result<ExitCode> {
    if let [name, dir] = &args.check[..] {
        let series = args.kernels.first().copied().unwrap_or(Series::V6_12);
        vmtest::check_results(name, std::path::Path::new(dir), series)?;
        println!("vm {series}: {name}: PASS ({dir})");
        return Ok(ExitCode::SUCCESS);
    }
    let mut report = Report::default();
    let mut setup = Setup::new(true);

    report.step("setup: toolchain", || setup.toolchain());
    let kernels: Vec<(Series, Result<Kernel, Status>)> = if args.no_vm {
        Vec::new()
    } else {
        report.step("setup: host packages", || setup.host_packages());
        let kernels = args
            .kernels
            .iter()
            .map(|&series| (series, kernel_step(&mut report, &mut setup, series)))
            .collect();
        // A setup step of its own, so that its time (a build when the
        // recipe changed) is not counted as a test's.
        if vmtest::needs_systemd_image(&args.kernels, &args.only) {
            report.step("setup: systemd guest image", || {
                crate::guest_image::ensure(&mut setup)
            });
        }
        kernels
    };
    let numatrace = if args.only.is_empty() {
        // The unit tests query Parquet files with it, --no-vm or not.
        report.step("setup: duckdb (python venv)", || setup.duckdb());
        cargo_steps(&mut report, &mut setup)
    } else {
        release_build(&mut report, &mut setup)
    };
    let fuzz_step = format!(
        "fuzz ({} targets, seed 1, at most {} s each)",
        crate::fuzz::TARGETS.len(),
        args.fuzz_time
    );
    if !args.only.is_empty() {
        report.push(&fuzz_step, Status::Skipped("--only".into()), Duration::ZERO);
    } else if args.fuzz_time == 0 {
        report.push(
            &fuzz_step,
            Status::Skipped("--fuzz-time 0".into()),
            Duration::ZERO,
        );
    } else {
        let fuzz = crate::fuzz::FuzzArgs {
            time: args.fuzz_time,
            seed: Some(1),
            only: Vec::new(),
        };
        report.step(&fuzz_step, || crate::fuzz::run(&fuzz, &mut setup));
    }
    package_step(&mut report, &mut setup, numatrace.as_deref(), &args.only);
    truth_step(
        &mut report,
        &mut setup,
        &kernels,
        numatrace.as_deref(),
        &args.only,
    );
    known_steps(
        &mut report,
        &mut setup,
        &kernels,
        numatrace.as_deref(),
        &args.only,
    );

    if args.no_vm {
        report.push(
            "vm tests",
            Status::Skipped("--no-vm".into()),
            Duration::ZERO,
        );
    }
    let mut booted = Vec::new();
    for (series, kernel) in kernels {
        booted.extend(vm_steps(
            &mut report,
            series,
            kernel,
            numatrace.as_deref(),
            &args.only,
        ));
    }
    if let Some(numatrace) = numatrace.as_deref() {
        icount_steps(&mut report, &booted, numatrace, &args.only);
    }

    Ok(if report.print() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The Debian package of the release build: built, installed into an
/// empty dpkg root and checked (`cargo xtask package`).
fn package_step(report: &mut Report, setup: &mut Setup, numatrace: Option<&Path>, only: &[String]) {
    let name = "package (.deb: install, units, man pages)";
    match numatrace {
        _ if !only.is_empty() => {
            report.push(name, Status::Skipped("--only".into()), Duration::ZERO)
        }
        None => report.push(
            name,
            Status::Skipped("the release build failed".into()),
            Duration::ZERO,
        ),
        Some(bin) => report
            .step(name, || {
                setup.host_packages()?;
                let deb = crate::package::build(bin)?;
                crate::package::check(&deb)
            })
            .unwrap_or_default(),
    }
}

/// `--only` for [`truth_step`].
const TRUTH_ONLY: &str = "truth";

/// The test bed's truth plugin against a workload whose accesses are
/// known (`vm::truth::self_test`), on 6.12: it tests QEMU and the plugin,
/// not the kernel, so one kernel is enough.
fn truth_step(
    report: &mut Report,
    setup: &mut Setup,
    kernels: &[(Series, Result<Kernel, Status>)],
    numatrace: Option<&Path>,
    only: &[String],
) {
    let name = "truth plugin (6.12: its counts against a known workload)";
    let kernel = kernels.iter().find(|(s, _)| *s == Series::V6_12);
    let skip = |why: &str| Status::Skipped(why.into());
    let status = match (kernel, numatrace) {
        _ if !only.is_empty() && !only.iter().any(|o| o == TRUTH_ONLY) => skip("--only"),
        (None, _) => skip("6.12 is not among the kernels tested"),
        (Some((_, Err(status))), _) => status.clone(),
        (_, None) => skip("the release build failed"),
        (Some((_, Ok(k))), Some(bin)) => {
            report.step(name, || {
                let said = crate::vm::truth::self_test(k, bin, setup)?;
                println!("truth plugin: {said}");
                Ok(())
            });
            return;
        }
    };
    report.push(name, status, Duration::ZERO);
}

/// `--only` for [`known_steps`].
const KNOWN_ONLY: &str = "known";

/// The truth scenario (`vm::known`) on 6.12 and 7.x: a workload whose hot
/// pages are known by construction, under the plugin, every policy scored.
fn known_steps(
    report: &mut Report,
    setup: &mut Setup,
    kernels: &[(Series, Result<Kernel, Status>)],
    numatrace: Option<&Path>,
    only: &[String],
) {
    let skip = |why: &str| Status::Skipped(why.into());
    for (series, kernel) in kernels
        .iter()
        .filter(|(s, _)| matches!(s, Series::V6_12 | Series::V7))
    {
        let name = format!("truth scenario {series} (known hot pages; every policy scored)");
        let status = match (kernel, numatrace) {
            _ if !only.is_empty() && !only.iter().any(|o| o == KNOWN_ONLY) => skip("--only"),
            (Err(status), _) => status.clone(),
            (_, None) => skip("the release build failed"),
            (Ok(k), Some(bin)) => {
                report.step(&name, || {
                    let said = crate::vm::known::scenario(k, bin, setup)?;
                    println!("truth scenario {series}: {said}");
                    Ok(())
                });
                continue;
            }
        };
        report.push(&name, status, Duration::ZERO);
    }
}

/// Fetches (or builds) the guest kernel of `series` as a step; without
/// one, the status its tests get: a failure, or a skip for a kernel that
/// may be unavailable.
fn kernel_step(report: &mut Report, setup: &mut Setup, series: Series) -> Result<Kernel, Status> {
    let name = format!("setup: kernel {series}");
    println!("\n==> {name}");
    let start = Instant::now();
    let kernel = match kernels::available(series, setup) {
        Ok(Availability::Ready(k)) => Ok(k),
        Ok(Availability::Unavailable(why)) => Err(Status::Skipped(why)),
        Err(e) => Err(Status::Fail(format!("{e:#}"))),
    };
    let status = match &kernel {
        Ok(k) => {
            println!("kernel {series}: {} {}", k.package, k.version);
            Status::Pass
        }
        Err(status) => status.clone(),
    };
    report.push(&name, status, start.elapsed());
    kernel
}

/// rustfmt, clippy, the unit tests and the release musl build; returns the
/// built numatrace if the build passed.
fn cargo_steps(report: &mut Report, setup: &mut Setup) -> Option<PathBuf> {
    report.step("cargo fmt --all --check", || {
        cmd::run(cmd::cargo().args(["fmt", "--all", "--check"]))
    });
    // numa-ebpf only builds for bpfel-unknown-none with nightly (numa-cli's
    // build script does that); on the host target it is not checkable.
    report.step("cargo clippy --workspace --all-targets", || {
        cmd::run(cmd::cargo().args([
            "clippy",
            "--workspace",
            "--exclude",
            "numa-ebpf",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    });
    report.step("cargo test --workspace", || {
        cmd::run(cmd::cargo().args(["test", "--workspace", "--exclude", "numa-ebpf"]))
    });
    release_build(report, setup)
}

fn release_build(report: &mut Report, setup: &mut Setup) -> Option<PathBuf> {
    report.step("build numatrace (release, musl, static)", || {
        let path = binary::build(true, setup)?;
        println!("built {} (static)", path.display());
        Ok(path)
    })
}

/// The VM tests on `series` but those of its instruction-count boot
/// ([`icount_steps`]), one step each; all of them skipped or failed
/// together when there is no kernel or no numatrace to boot with. Returns
/// the kernel when it could boot.
fn vm_steps(
    report: &mut Report,
    series: Series,
    kernel: Result<Kernel, Status>,
    numatrace: Option<&Path>,
    only: &[String],
) -> Option<Kernel> {
    let names: Vec<String> = vmtest::TESTS
        .iter()
        .filter(|t| t.kernels.contains(&series) && vmtest::selected(t, only))
        .map(|t| format!("vm {series}: {}", t.name))
        .collect();
    let kernel = match kernel {
        Ok(k) => k,
        Err(status) => {
            let status = match status {
                Status::Fail(why) => Status::Fail(format!("no {series} kernel: {why}")),
                other => other,
            };
            for n in &names {
                report.push(n, status.clone(), Duration::ZERO);
            }
            return None;
        }
    };
    let Some(numatrace) = numatrace else {
        for n in &names {
            report.push(
                n,
                Status::Skipped("the release build failed".into()),
                Duration::ZERO,
            );
        }
        return None;
    };
    println!("\n==> vm tests on {series} ({})", kernel.package);
    let results = vmtest::run_kernel(&kernel, numatrace, only);
    push_results(report, series, results);
    Some(kernel)
}

/// The tests of every kernel's instruction-count boot, the boots side by
/// side ([`vmtest::run_icount`]).
fn icount_steps(report: &mut Report, kernels: &[Kernel], numatrace: &Path, only: &[String]) {
    let kernels: Vec<Kernel> = kernels
        .iter()
        .filter(|k| vmtest::boots_icount(k.series, only))
        .cloned()
        .collect();
    if kernels.is_empty() {
        return;
    }
    let names: Vec<&str> = kernels.iter().map(|k| k.series.name()).collect();
    println!(
        "\n==> vm tests in instruction-count boots, side by side: {}",
        names.join(", ")
    );
    for (kernel, results) in kernels
        .iter()
        .zip(vmtest::run_icount(&kernels, numatrace, only))
    {
        push_results(report, kernel.series, results);
    }
}

fn push_results(report: &mut Report, series: Series, results: Vec<vmtest::TestResult>) {
    for r in results {
        let status = match r.outcome {
            Ok(()) => Status::Pass,
            Err(e) => {
                eprintln!("FAIL vm {series}: {}: {e:#}", r.name);
                Status::Fail(format!("{e:#}"))
            }
        };
        let seconds = Duration::from_secs(r.seconds.unwrap_or(0));
        report.push(&format!("vm {series}: {}", r.name), status, seconds);
    }
}
