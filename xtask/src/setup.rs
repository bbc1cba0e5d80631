//! `cargo xtask setup`: installs, idempotently, everything the other commands
//! need on a fresh machine of the project's kind (Debian bookworm, root, rustup):
//! the nightly toolchain with rust-src, the musl target, bpf-linker, the host
//! packages for the QEMU test bed and the Parquet test's DuckDB (host.rs),
//! the guest kernels (kernels.rs) and the systemd guest's root disk image
//! (guest_image.rs). Each item prints `did: ...` or `skip: ... (already present)`;
//! the other commands call the parts they need, printing only what they had
//! to do.

use anyhow::Result;
use indicatif::ProgressBar;

use crate::host::Setup;
use crate::kernels::{self, Kernel, Series};

/// Everything: what `cargo xtask setup` does, with a bar over its steps
/// on a terminal.
pub(crate) fn all(setup: &mut Setup, kernels: &[Series]) -> Result<Vec<Kernel>> {
    let bar = crate::progress::steps(3 + kernels.len() as u64);
    let done = steps(setup, kernels, &bar);
    crate::progress::finish(&bar);
    done
}

fn steps(setup: &mut Setup, kernels: &[Series], bar: &ProgressBar) -> Result<Vec<Kernel>> {
    bar.set_message("toolchain");
    setup.toolchain()?;
    bar.inc(1);
    bar.set_message("host packages");
    setup.host_packages()?;
    setup.duckdb()?;
    bar.inc(1);
    let mut ready = Vec::with_capacity(kernels.len());
    for &s in kernels {
        bar.set_message(format!("kernel {s}"));
        ready.push(kernels::ensure(s, setup)?);
        bar.inc(1);
    }
    bar.set_message("systemd guest image");
    crate::guest_image::ensure(setup)?;
    bar.inc(1);
    Ok(ready)
}
