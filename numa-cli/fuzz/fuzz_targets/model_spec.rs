//! Any text as a model spec with the flags' defaults: line 1 is the spec
//! (`fault-count:threshold=1e6,...`), lines 2-6 the --threshold,
//! --counter, --stamp, --window-ms and --rate-limit values, lines 7-9 the
//! kernel's hot_threshold_ms, scan_period_max_ms and rate limit. Built or
//! refused with an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numa_core::model::policy::{build, KernelDefaults, ModelDefaults};

fuzz_target!(|text: &str| {
    let mut lines = text.split('\n');
    let spec = lines.next().unwrap_or_default();
    let mut field = || lines.next().filter(|l| !l.is_empty());
    let d = ModelDefaults {
        threshold: field().and_then(|v| v.parse().ok()),
        counter: field().map(str::to_owned),
        stamp: field().map(str::to_owned),
        window_ms: field().and_then(|v| v.parse().ok()),
        rate_limit: field().map(|v| v == "on"),
    };
    let kd = KernelDefaults::default();
    let k = KernelDefaults {
        hot_threshold_ms: field().and_then(|v| v.parse().ok()).unwrap_or(kd.hot_threshold_ms),
        scan_period_max_ms: field().and_then(|v| v.parse().ok()).unwrap_or(kd.scan_period_max_ms),
        rate_limit_mbps: field().and_then(|v| v.parse().ok()).unwrap_or(kd.rate_limit_mbps),
        ..kd
    };
    let _ = build(spec, &d, &k);
});
