//! Models by name: specs parsed into policies, with defaults from the
//! kernel's tunables and the flat command-line options.
use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

use super::{
    fault_count::{Counter, FaultCount, StampKind},
    kernel_time::KernelTime,
    limits::RateLimiter,
    two_touch::TwoTouch,
    Policy,
};
use crate::topology::Tunables;

/// Kernel tunables the models default to (from the trace header).
#[derive(Debug, Clone, Copy)]
pub struct KernelDefaults {
    pub hot_threshold_ms: u64,
    pub scan_period_max_ms: u64,
    pub rate_limit_mbps: u64,
}

impl Default for KernelDefaults {
    fn default() -> Self {
        KernelDefaults {
            hot_threshold_ms: 1000,
            scan_period_max_ms: 60000,
            rate_limit_mbps: 65536,
        }
    }
}

impl KernelDefaults {
    /// The host's tunables where it had them (a trace header's), else the
    /// kernel's defaults.
    pub fn from_tunables(t: &Tunables) -> Self {
        let d = KernelDefaults::default();
        KernelDefaults {
            hot_threshold_ms: t.hot_threshold_ms.unwrap_or(d.hot_threshold_ms),
            scan_period_max_ms: t.scan_period_max_ms.unwrap_or(d.scan_period_max_ms),
            rate_limit_mbps: t.promote_rate_limit_mbps.unwrap_or(d.rate_limit_mbps),
        }
    }
}

/// The models run when none is named.
pub const DEFAULT_MODELS: [&str; 3] = ["kernel-time", "fault-count", "two-touch"];

/// Builds every model in `specs`; none named: [`DEFAULT_MODELS`].
pub fn build_all(
    specs: &[String],
    d: &ModelDefaults,
    k: &KernelDefaults,
) -> Result<Vec<Box<dyn Policy>>> {
    if specs.is_empty() {
        return DEFAULT_MODELS.iter().map(|s| build(s, d, k)).collect();
    }
    specs.iter().map(|s| build(s, d, k)).collect()
}

/// Flat model options (`--threshold 2e5 --counter global`) that apply to
/// every model that does not set them in its spec.
#[derive(Debug, Clone, Default)]
pub struct ModelDefaults {
    pub threshold: Option<f64>,
    pub counter: Option<String>,
    pub stamp: Option<String>,
    pub window_ms: Option<u64>,
    pub rate_limit: Option<bool>,
}

fn parse_num(v: &str) -> Result<f64> {
    v.parse::<f64>()
        .with_context(|| format!("{v:?} is not a number (1e6 and 1000000 both work)"))
}

/// Builds a policy from `name[:key=value,...]`.
pub fn build(spec: &str, d: &ModelDefaults, k: &KernelDefaults) -> Result<Box<dyn Policy>> {
    let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
    let mut kv: BTreeMap<&str, &str> = BTreeMap::new();
    for pair in rest.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .with_context(|| format!("model option {pair:?} is not key=value"))?;
        kv.insert(key.trim(), value.trim());
    }
    let get = |key: &str| kv.get(key).map(|v| (*v).to_owned());
    let policy: Box<dyn Policy> = match name {
        "kernel-time" => {
            let th = match get("threshold") {
                Some(v) => parse_num(&v)? as u64,
                None => k.hot_threshold_ms,
            };
            let rate = match get("rate_limit") {
                Some(v) => parse_num(&v)? as u64,
                None => k.rate_limit_mbps,
            };
            Box::new(KernelTime::new(th, k.scan_period_max_ms, rate))
        }
        "fault-count" => {
            let threshold = match get("threshold") {
                Some(v) => parse_num(&v)?,
                None => d.threshold.unwrap_or(1e6),
            };
            if threshold < 1.0 {
                bail!("fault-count threshold must be >= 1");
            }
            let counter = match get("counter").or_else(|| d.counter.clone()).as_deref() {
                None | Some("mm") => Counter::Mm,
                Some("global") => Counter::Global,
                Some(o) => bail!("--counter {o}: use mm or global"),
            };
            let stamp = match get("stamp").or_else(|| d.stamp.clone()).as_deref() {
                None | Some("first") => StampKind::First,
                Some("latest") => StampKind::Latest,
                Some(o) => bail!("--stamp {o}: use first or latest"),
            };
            let rate_on = match get("rate_limit").as_deref() {
                Some("on") | Some("true") => true,
                Some("off") | Some("false") => false,
                Some(o) => bail!("rate_limit={o}: use on or off"),
                None => d.rate_limit.unwrap_or(false),
            };
            Box::new(FaultCount {
                threshold: threshold as u64,
                counter,
                stamp,
                rate: rate_on.then(|| RateLimiter::new(k.rate_limit_mbps)),
            })
        }
        "two-touch" => {
            let window = match get("window_ms") {
                Some(v) => parse_num(&v)? as u64,
                None => d.window_ms.unwrap_or(k.hot_threshold_ms * 2),
            };
            Box::new(TwoTouch::new(window, 1 << 22))
        }
        other => bail!("unknown model {other:?}: use kernel-time, fault-count or two-touch"),
    };
    Ok(policy)
}
