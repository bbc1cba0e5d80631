//! What numatrace renders for people and for other tools, apart from the
//! commands that call it: the HTML report. It reads nothing by itself:
//! the caller feeds each trace through a [`ReadTrace`], so the binary keeps
//! its progress bar and tests read plainly.
pub mod report;

use std::path::Path;

use anyhow::Result;
use numa_core::sink::Sink;

/// Feeds the trace file at the path to the sinks and returns the reader's
/// warning about a truncated or damaged trace.
pub type ReadTrace<'a> = dyn FnMut(&Path, &mut [&mut dyn Sink]) -> Result<Option<String>> + 'a;
