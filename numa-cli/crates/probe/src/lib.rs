//! Everything that touches the kernel's BPF interface: what the running
//! kernel offers (`discover`, `doctor`, `preflight`, each prerequisite a
//! `check`), the values the programs need (`params`), loading and
//! attaching the programs with fallbacks (`load`), the one attach sequence
//! every attaching command uses (`session`), and per-CPU arrays read whole
//! (`percpu`).
//! The pure attach plan (facts -> hooks) lives in `numa_core::plan`, so a
//! trace header can carry it; the BPF object is compiled by this crate's
//! build.rs and embedded here only.
// Dev-dependencies are for the integration tests and benches.
#![cfg_attr(test, allow(unused_crate_dependencies))]
pub mod check;
pub mod discover;
pub mod doctor;
pub mod load;
pub mod loaded;
pub mod memory;
pub mod params;
pub mod percpu;
pub mod preflight;
pub mod session;
