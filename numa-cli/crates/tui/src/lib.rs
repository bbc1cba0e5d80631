//! The terminal UI of `numatrace top`. Data flows one way:
//!
//! ```text
//! source (probes | trace) -> agg::Aggregator (a pipeline Sink, background)
//!     -> frame::Frame every refresh interval, over a channel
//!     -> app::App (state; only `update(Action)` changes it) -> view (widgets)
//! ```
//!
//! The draw loop never waits for the pipeline: it renders the latest frame
//! it has and polls the keyboard with a short timeout.
// Dev-dependencies are for the integration tests and benches.
#![cfg_attr(test, allow(unused_crate_dependencies))]
pub mod action;
pub mod agg;
pub mod app;
pub use numa_core::frame;
pub mod procfs;
pub mod term;
pub mod view;
