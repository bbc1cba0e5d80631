//! numatrace's pure core: the decoded events and snapshots, the trace file
//! format, the [`sink::Sink`] trait every consumer implements, the models
//! (totals, histograms, scan index, shadow policies) and the data that
//! describes a host (topology, kernel parameters, attach plan, and the
//! folio map's plan: which slow-node pages it follows within a budget).
//!
//! Nothing here attaches probes, reads the clock, spawns threads or parses
//! command lines: time arrives inside events and snapshots, so a replayed
//! trace gives the same results as the live run that recorded it. The trace
//! reader and writer take files or any `Read`/`Write`.
// Dev-dependencies are for the integration tests and benches.
#![cfg_attr(test, allow(unused_crate_dependencies))]
pub mod damon;
pub mod decode;
pub mod doctor;
pub mod frame;
pub mod histjson;
pub mod mapplan;
pub mod model;
pub mod params;
pub mod plan;
pub mod printable;
pub mod procfs;
pub mod rng;
pub mod sampling;
pub mod sink;
pub mod stamping;
pub mod topology;
pub mod trace;
pub mod truth;
pub mod workload;
