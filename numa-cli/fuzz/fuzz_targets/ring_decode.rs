//! Any bytes as one ring-buffer record: decoded or refused, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(ev) = numa_core::decode::decode(data) {
        let _ = format!("{ev:?}");
    }
});
