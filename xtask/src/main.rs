//! `cargo xtask`: numatrace's developer commands. `setup` installs what the
//! others need, `build` makes the static musl binary, `vm` boots the
//! tiered-NUMA QEMU test bed, `demo` shows numatrace in it, and `test` runs
//! everything CI runs.

mod binary;
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
}

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
            let cli = Cli::parse_from([
                "cargo xtask",
                "vm",
                "--kernel",
                "6.12",
                "--",
                "echo 2 > /proc/sys/kernel/numa_balancing; numatrace doctor",
            ]);
            run(cli.command)
        }
        Cmd::Test(args) => test::run(args),
    }
}
