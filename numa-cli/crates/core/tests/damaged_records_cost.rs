//! A damaged record costs what a good one does, with RUST_BACKTRACE=1 set
//! too (common in shells): no backtrace is captured per record. Its own
//! test binary, as the environment variable is process-wide and read once.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::time::{Duration, Instant};

use numa_core::{
    decode::{fixtures::fault, Event},
    trace::{fixtures::header, Reader, Writer},
};
use numa_ebpf_common::Outcome;

const RECORDS: usize = 10_000;

/// A trace of `RECORDS` good fault records.
fn good() -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), &header()).expect("writer");
    for i in 0..RECORDS as u64 {
        w.event(&Event::Fault(fault(i, i, 1, Outcome::PromoteHot)))
            .expect("event");
    }
    w.finish(1, "test").expect("finish")
}

/// A trace of `RECORDS` zero-length fault records (tag 1, length 0).
fn damaged() -> Vec<u8> {
    let empty = Writer::new(Vec::new(), &header())
        .expect("writer")
        .finish(1, "test")
        .expect("finish");
    let header_len = u32::from_le_bytes(empty[12..16].try_into().expect("4 bytes")) as usize;
    let (head, footer) = empty.split_at(16 + header_len);
    let mut bytes = head.to_vec();
    for _ in 0..RECORDS {
        bytes.extend_from_slice(&[1, 0, 0, 0, 0]);
    }
    bytes.extend_from_slice(footer);
    bytes
}

/// Time to read `bytes` through, and the records that did not decode.
fn read(bytes: &[u8]) -> (Duration, usize) {
    let start = Instant::now();
    let bad = Reader::new(bytes)
        .expect("reader")
        .filter(Result::is_err)
        .count();
    (start.elapsed(), bad)
}

#[test]
fn damaged_records_cost_about_what_good_ones_do_with_backtraces_on() {
    std::env::set_var("RUST_BACKTRACE", "1");
    let (good, damaged) = (good(), damaged());
    // Warm both paths (page faults, lazy statics) before measuring.
    read(&good);
    read(&damaged);
    let best = |bytes: &[u8]| {
        (0..3)
            .map(|_| read(bytes))
            .min_by_key(|r| r.0)
            .expect("three runs")
    };
    let (t_good, bad_in_good) = best(&good);
    let (t_damaged, bad) = best(&damaged);
    assert_eq!((bad_in_good, bad), (0, RECORDS));
    println!("{RECORDS} good records: {t_good:?}, {RECORDS} damaged: {t_damaged:?}");
    // A damaged record is a header read and a length check, less than a
    // good one's decoding; a backtrace captured per record is several times
    // a good record's cost here, and seconds in all in the release binary.
    assert!(
        t_damaged <= t_good * 2 + Duration::from_millis(2),
        "{RECORDS} damaged records took {t_damaged:?}, good ones {t_good:?}"
    );
}
