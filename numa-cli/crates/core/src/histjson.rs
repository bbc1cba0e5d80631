//! A line of `numatrace hist --json`: one interval's histograms, keyed by
//! group. Its readers (the VM tests' checks among them) deserialize this
//! type, so a field renamed here fails to compile there.
use std::{borrow::Cow, collections::BTreeMap};

use serde::{Deserialize, Serialize};

/// One log2 bucket: its integer range and count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JsonBucket {
    pub min: u64,
    pub max: u64,
    pub count: u64,
}

/// A histogram: its count, sum and non-empty bucket span.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JsonHist {
    pub count: u64,
    pub sum: u64,
    pub buckets: Vec<JsonBucket>,
}

/// The interval's histograms by group (`--by`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JsonData {
    pub latency_ns: BTreeMap<String, JsonHist>,
    pub fault_delta: BTreeMap<String, JsonHist>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JsonInterval<'a> {
    /// Always `hist`.
    #[serde(rename = "type")]
    pub kind: Cow<'a, str>,
    pub interval: u64,
    pub start_s: f64,
    pub end_s: f64,
    /// `all`, `outcome`, `process` or `node`.
    pub by: Cow<'a, str>,
    /// `kernel` (the programs' own histograms) or `events` (from records).
    pub source: Cow<'a, str>,
    pub data: JsonData,
    /// Groups left out by --top.
    pub omitted: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<Cow<'a, str>>,
}
