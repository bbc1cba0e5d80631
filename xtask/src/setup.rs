//! `cargo xtask setup`: installs, idempotently, everything the other commands
//! need on a fresh machine of the project's kind (Debian bookworm, root, rustup):
//! the nightly toolchain with rust-src, the musl target, bpf-linker, the host
//! packages for the QEMU test bed and the Parquet test's DuckDB (host.rs),
//! and the guest kernels (kernels.rs). Each item prints `did: ...` or `skip: ... (already present)`;
//! the other commands call the parts they need, printing only what they had
//! to do.

use anyhow::Result;

use crate::host::Setup;
use crate::kernels::{self, Kernel, Series};

/// Everything: what `cargo xtask setup` does.
pub fn all(setup: &mut Setup, kernels: &[Series]) -> Result<Vec<Kernel>> {
    setup.toolchain()?;
    setup.host_packages()?;
    setup.duckdb()?;
    kernels.iter().map(|&s| kernels::ensure(s, setup)).collect()
}
