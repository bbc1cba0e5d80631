//! numatrace's userspace: probes (load, attach), decode, models and sinks.
//!
//! Data flows one way: kernel event -> decode -> model -> sinks. The binary
//! (`main.rs`) only parses the command line and dispatches; every module
//! lives here so benchmarks and integration tests can use them.
pub mod cli;
pub mod decode;
pub mod doctor;
pub mod dump;
pub mod evaluate;
pub mod export;
pub mod hist;
pub mod histtext;
pub mod model;
pub mod pipeline;
pub mod probe;
pub mod promote;
pub mod promoter_state;
pub mod report;
pub mod rng;
pub mod stats;
pub mod system;
pub mod top;
pub mod trace;
pub mod tui;
pub mod workload;
