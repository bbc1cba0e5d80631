//! Any text as the promoter's state file, at any clock reading: the first
//! eight bytes are the reader's clock (an f64), the rest the file.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (now, text) = match data.split_first_chunk::<8>() {
        Some((clock, rest)) => (f64::from_le_bytes(*clock), rest),
        None => (0.0, data),
    };
    let text = String::from_utf8_lossy(text);
    let _ = numa_host::promoter_state::judge(&text, now, |pid, _| pid % 2 == 0);
});
