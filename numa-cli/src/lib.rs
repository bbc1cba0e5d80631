//! numatrace's userspace: probes (load, attach), decode, models and sinks.
//!
//! Data flows one way: kernel event -> decode -> model -> sinks. The binary
//! (`main.rs`) only parses the command line and dispatches; every module
//! lives here so benchmarks and integration tests can use them.
pub mod cli;
pub mod dump;
pub mod evaluate;
pub mod export;
pub mod hist;
pub mod pipeline;
pub mod promote;
pub mod report;
pub mod stats;
pub mod top;
pub mod tui;
pub mod workload;
pub use numa_core::{decode, histtext, model, rng, trace};
pub use numa_host::{promoter_state, system};
