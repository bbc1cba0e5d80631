//! Models by name: specs parsed into policies, with defaults from the
//! kernel's tunables and the flat command-line options.
use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

use super::{
    fault_count::{Counter, FaultCount, Mode, StampKind},
    kernel_time::KernelTime,
    limits::{Candidates, RateLimiter},
    two_touch::TwoTouch,
    Policy,
};
use crate::{params::KernelParams, topology::Tunables};

/// Kernel tunables the models default to (from the trace header).
#[derive(Debug, Clone, Copy)]
pub struct KernelDefaults {
    pub hot_threshold_ms: u64,
    pub scan_period_max_ms: u64,
    pub rate_limit_mbps: u64,
    /// The patched kernel's `fault_count_threshold` (debugfs).
    pub fault_count_threshold: u64,
    /// LAST_CPUPID_MASK and PAGE_ACCESS_TIME_BUCKETS (the folio field the
    /// access time or fault count is kept in).
    pub cpupid_mask: u32,
    pub access_time_buckets: u32,
}

impl Default for KernelDefaults {
    fn default() -> Self {
        // CONFIG_NR_CPUS=8192 (distribution kernels): 8 + 13 bits.
        let (cpupid_mask, access_time_buckets) = crate::params::cpupid_layout(8192);
        KernelDefaults {
            hot_threshold_ms: 1000,
            scan_period_max_ms: 60000,
            rate_limit_mbps: 65536,
            fault_count_threshold: 1_000_000,
            cpupid_mask,
            access_time_buckets,
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
            fault_count_threshold: t.fault_count_threshold.unwrap_or(d.fault_count_threshold),
            ..d
        }
    }

    /// [`from_tunables`](Self::from_tunables) plus the cpupid field layout
    /// of the kernel the probes ran on (a trace header's), when known.
    pub fn from_host(t: &Tunables, params: Option<&KernelParams>) -> Self {
        let mut k = Self::from_tunables(t);
        if let Some(p) = params.filter(|p| p.cpupid_mask != 0) {
            k.cpupid_mask = p.cpupid_mask;
            k.access_time_buckets = p.access_time_buckets;
        }
        k
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

/// The kernel keeps these tunables in `unsigned int`s: a value above that
/// (a damaged trace header) is clamped there, so no model arithmetic on
/// them can overflow.
fn kernel_clamped(k: &KernelDefaults) -> KernelDefaults {
    let c = |v: u64| v.min(u64::from(u32::MAX));
    KernelDefaults {
        hot_threshold_ms: c(k.hot_threshold_ms),
        scan_period_max_ms: c(k.scan_period_max_ms),
        rate_limit_mbps: c(k.rate_limit_mbps),
        fault_count_threshold: c(k.fault_count_threshold),
        ..*k
    }
}

/// The fault-count threshold's range, for the spec option, the flat
/// `--threshold` flag and both modes alike: the patched kernel keeps it in
/// an `unsigned int`, and the idealised count is compared with it.
pub const THRESHOLD_RANGE: (f64, f64) = (1.0, 4_294_967_295.0);

/// `v` as a fault-count threshold, or the one message that states its
/// range.
pub fn check_threshold(v: f64) -> std::result::Result<f64, String> {
    let (lo, hi) = THRESHOLD_RANGE;
    if v.is_finite() && (lo..=hi).contains(&v) {
        return Ok(v);
    }
    Err(threshold_message(v))
}

/// Why `given` is no fault-count threshold: the range, stated once.
pub fn threshold_message(given: impl std::fmt::Display) -> String {
    let (lo, hi) = THRESHOLD_RANGE;
    format!(
        "fault-count threshold {given}: give hint faults from {lo} to {hi} \
         (the patched kernel's unsigned int)"
    )
}

/// Builds a policy from `name[:key=value,...]`.
pub fn build(spec: &str, d: &ModelDefaults, k: &KernelDefaults) -> Result<Box<dyn Policy>> {
    let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
    let o = Options::parse(rest)?;
    let k = &kernel_clamped(k);
    let policy: Box<dyn Policy> = match name {
        "kernel-time" => Box::new(kernel_time(&o, k)?),
        "fault-count" => Box::new(fault_count(&o, d, k)?),
        "two-touch" => Box::new(two_touch(&o, d, k)?),
        other => bail!("unknown model {other:?}: use kernel-time, fault-count or two-touch"),
    };
    Ok(policy)
}

/// Bare words a spec may hold besides `key=value` options.
const FLAGS: [&str; 1] = ["exact"];

/// The `key=value` options of one spec.
struct Options<'a>(BTreeMap<&'a str, &'a str>);

impl<'a> Options<'a> {
    fn parse(rest: &'a str) -> Result<Self> {
        let mut kv = BTreeMap::new();
        for pair in rest.split(',').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some((key, value)) => kv.insert(key.trim(), value.trim()),
                // A bare word is a flag (`fault-count:exact`).
                None if FLAGS.contains(&pair.trim()) => kv.insert(pair.trim(), ""),
                None => {
                    bail!("model option {pair:?} is not key=value (or one of the flags {FLAGS:?})")
                }
            };
        }
        Ok(Options(kv))
    }

    /// Refuses a key (or flag) that `model` does not take, naming the
    /// ones it does: a typo would otherwise run with the default.
    fn only(&self, model: &str, keys: &[&str]) -> Result<()> {
        if let Some(k) = self.0.keys().find(|k| !keys.contains(k)) {
            bail!(
                "{model} has no option {k:?}: its options are {}",
                keys.join(", ")
            );
        }
        Ok(())
    }

    fn flag(&self, name: &str) -> bool {
        self.0.get(name) == Some(&"")
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.get(key).copied()
    }

    /// The number under `key`, when given: finite and within `lo..=hi`.
    fn num(&self, key: &str, lo: f64, hi: f64) -> Result<Option<f64>> {
        let Some(v) = self.get(key).map(parse_num).transpose()? else {
            return Ok(None);
        };
        if !(v.is_finite() && (lo..=hi).contains(&v)) {
            bail!("model option {key}={v}: use a number from {lo} to {hi}");
        }
        Ok(Some(v))
    }
}

fn kernel_time(o: &Options, k: &KernelDefaults) -> Result<KernelTime> {
    o.only("kernel-time", &["threshold", "rate_limit"])?;
    let th = o.num("threshold", 0.0, f64::from(u32::MAX))?;
    let rate = o.num("rate_limit", 0.0, f64::from(u32::MAX))?;
    let th = th.map_or(k.hot_threshold_ms, |v| v as u64);
    let rate = rate.map_or(k.rate_limit_mbps, |v| v as u64);
    Ok(KernelTime::new(th, k.scan_period_max_ms, rate)
        .with_access_time(k.cpupid_mask, k.access_time_buckets))
}

/// `fault-count[:exact,...]`: the patched kernel unless `exact` is given.
fn fault_count(o: &Options, d: &ModelDefaults, k: &KernelDefaults) -> Result<FaultCount> {
    o.only(
        "fault-count",
        &["exact", "threshold", "counter", "stamp", "rate_limit"],
    )?;
    let mode = if o.flag("exact") {
        Mode::Exact
    } else {
        Mode::Patch
    };
    let given = o.get("threshold").map(parse_num).transpose()?;
    let threshold = match given.or(d.threshold) {
        Some(v) => v,
        None if mode == Mode::Patch => k.fault_count_threshold as f64,
        None => 1e6,
    };
    let threshold = check_threshold(threshold).map_err(anyhow::Error::msg)?;
    let counter = match o.get("counter").or(d.counter.as_deref()) {
        None | Some("mm") => Counter::Mm,
        Some("global") if mode == Mode::Exact => Counter::Global,
        Some("global") => bail!(
            "counter=global is not what the patch counts (a per-mm counter): \
             use fault-count:exact,counter=global for the idealised global count"
        ),
        Some(v) => bail!("--counter {v}: use mm or global"),
    };
    let stamp = match o.get("stamp").or(d.stamp.as_deref()) {
        None | Some("first") => StampKind::First,
        Some("latest") => StampKind::Latest,
        Some(v) => bail!("--stamp {v}: use first or latest"),
    };
    // The patched kernel keeps its rate limit; the idealised count has none
    // unless asked.
    let rate_on = match o.get("rate_limit") {
        Some("on") | Some("true") => true,
        Some("off") | Some("false") => false,
        Some(v) => bail!("rate_limit={v}: use on or off"),
        None => d.rate_limit.unwrap_or(mode == Mode::Patch),
    };
    Ok(FaultCount {
        threshold: threshold as u64,
        counter,
        stamp,
        mode,
        rate: rate_on.then(|| RateLimiter::new(k.rate_limit_mbps)),
        cpupid_mask: k.cpupid_mask,
        candidates: Candidates::default(),
    })
}

fn two_touch(o: &Options, d: &ModelDefaults, k: &KernelDefaults) -> Result<TwoTouch> {
    o.only("two-touch", &["window_ms"])?;
    let window = match o.num("window_ms", 1.0, 86_400_000.0)? {
        Some(v) => v as u64,
        None => d.window_ms.unwrap_or(k.hot_threshold_ms * 2),
    };
    Ok(TwoTouch::new(window, 1 << 22))
}
