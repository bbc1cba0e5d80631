//! What numatrace renders for people and for other tools, apart from the
//! commands that call it: the HTML report, the JSON-lines and Parquet
//! dumps, the histograms, the text of stats, shadow and replay. It reads
//! no trace's records by itself: the caller feeds them (a [`ReadTrace`],
//! or a reader and a progress callback), so the binary keeps its progress
//! bar and tests read plainly.
// Dev-dependencies are for the integration tests and benches.
#![cfg_attr(test, allow(unused_crate_dependencies))]
pub mod dump;
pub mod evaluate;
pub mod explain;
pub mod hist;
pub mod histtext;
pub mod report;
pub mod scorecard;
pub mod stats;

use std::path::Path;

use anyhow::Result;
use numa_core::sink::Sink;

/// Feeds the trace file at the path to the sinks and returns the reader's
/// warning about a truncated or damaged trace.
pub type ReadTrace<'a> = dyn FnMut(&Path, &mut [&mut dyn Sink]) -> Result<Option<String>> + 'a;
