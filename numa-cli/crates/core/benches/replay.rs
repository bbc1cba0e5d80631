//! Replay throughput of the shadow engine: events/s on one core for each
//! model and for all three together, on a synthetic stream of 10 million
//! hint faults over 512 Ki distinct folios (decoded from raw records, as a
//! replay does). Memory is bounded by distinct folios, not stream length:
//! the bench prints the engine's tracked-state sizes after the run.
//!
//! The `stream` case only makes and decodes the events: its cost is part
//! of every other figure. Quick runs end with the two figures the replay
//! throughput goal is stated in, from the same run: the three default
//! models together and `fault-count` alone.
//!
//! `trace_read_1M_events` adds the trace file reader in front (records
//! parsed from an in-memory trace, as `numatrace replay` reads a file).
//!
//! On a shared machine criterion's wall clock measures the neighbours too:
//! `NUMATRACE_BENCH_QUICK=1 cargo bench -p numa-core --bench replay [case]`
//! runs each case once and reports events/s of this thread's CPU time
//! (`NUMATRACE_BENCH_EVENTS`, `NUMATRACE_BENCH_FOLIOS` resize the stream).
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use numa_core::{
    decode::{decode, raw_bytes, Event},
    model::{
        policy::{build, KernelDefaults, ModelDefaults},
        shadow::Shadow,
    },
    rng::Rng,
    trace,
};
use numa_ebpf_common::{
    decision, ext_flags as xf, fault_flags as ff, EventKind, FaultEvent, Outcome,
};

const EVENTS: u64 = 10_000_000;
const FOLIOS: u64 = 512 * 1024;
const TRACE_EVENTS: u64 = 1_000_000;

const CASES: [(&str, &[&str]); 5] = [
    // No engine: the cost of the synthetic stream itself, included in
    // every other case's figure.
    ("stream", &[]),
    ("fault-count", &["fault-count"]),
    ("kernel-time", &["kernel-time"]),
    ("two-touch", &["two-touch"]),
    ("all-three", &["kernel-time", "fault-count", "two-touch"]),
];

fn event(i: u64, g: &mut Rng, folios: u64) -> FaultEvent {
    let r = g.next_u64();
    // A power-of-two count (the default) needs no division.
    let folio = if folios.is_power_of_two() {
        r & (folios - 1)
    } else {
        r % folios
    };
    let latency_ms = (r >> 20) % 4000;
    let ts_ns = 1_000_000_000_000 + i * 1000;
    let outcome = if latency_ms < 1000 {
        Outcome::PromoteHot
    } else {
        Outcome::RejectLatency
    };
    FaultEvent {
        kind: EventKind::Fault as u32,
        ts_ns,
        // 8 processes sharing the folio space: one process per folio.
        pid_tgid: ((100 + folio % 8) << 32) | 100,
        addr: 0x7f00_0000_0000 + folio * 4096,
        folio: 0xffff_ea00_0000_0000 + folio * 64,
        seq_global: i + 1,
        seq_mm: i / 8 + 1,
        scan_ns: ts_ns - latency_ms * 1_000_000,
        scan_seq_global: (i + 1).saturating_sub((r >> 8) % 2_000_000),
        scan_seq_mm: (i / 8 + 1).saturating_sub((r >> 8) % 250_000),
        kernel_latency_ms: latency_ms as u32,
        threshold_ms: 1000,
        nr_pages: 1,
        src_nid: 1,
        dst_nid: 0,
        outcome: outcome as u8,
        decision: decision::of(outcome.promoted()),
        flags: ff::HAS_STAMP | ff::DECIDED | ff::KERNEL_LATENCY | ff::HAS_FAULT_HOOK,
        // As the probes record a decision that reached the threshold step
        // on a kernel with the patch's inputs: every model does its whole
        // work, none stops at a shortcut.
        ext_flags: xf::THRESHOLD_PATH
            | xf::MM_FAULT_COUNT
            | xf::STORED_FAULT_COUNT
            | xf::NODE_CANDIDATES,
        mm_fault_count: (i / 8 + 1) as u32,
        stored_fault_count: (i / 8 + 1).saturating_sub((r >> 8) % 250_000) as u32,
        stored_fault_count_ns: ts_ns - latency_ms * 1_000_000,
        node_candidates: i / 4,
        comm: *b"bench\0\0\0\0\0\0\0\0\0\0\0",
        ..FaultEvent::default()
    }
}

fn engine(specs: &[&str]) -> Shadow {
    let d = ModelDefaults::default();
    let k = KernelDefaults::default();
    let models = specs
        .iter()
        .map(|s| build(s, &d, &k).expect("model spec"))
        .collect();
    Shadow::new(models, 10)
}

fn run(specs: &[&str], events: u64, folios: u64) -> Shadow {
    let mut engine = engine(specs);
    let mut g = Rng::new(0x9E37_79B9_7F4A_7C15);
    for i in 0..events {
        let ev = Event::Fault(event(i, &mut g, folios));
        let ev = decode(raw_bytes(&ev)).expect("decodes");
        if specs.is_empty() {
            // The `stream` case: what making and decoding the events costs.
            std::hint::black_box(&ev);
        } else {
            engine.event(&ev);
        }
    }
    engine
}

/// The same stream as a trace file's bytes.
fn trace_bytes(events: u64) -> Vec<u8> {
    let header = trace::fixtures::header();
    let mut w = trace::Writer::new(Vec::with_capacity(events as usize * 150), &header)
        .expect("trace writer");
    let mut g = Rng::new(0x9E37_79B9_7F4A_7C15);
    for i in 0..events {
        w.event(&Event::Fault(event(i, &mut g, FOLIOS)))
            .expect("event");
    }
    w.finish(0, "bench").expect("finish")
}

/// Reads a trace into `engine` (or only decodes it), as `replay` does.
fn replay_trace(bytes: &[u8], mut engine: Option<&mut Shadow>) -> u64 {
    let mut events = 0;
    let mut reader = trace::Reader::new(bytes).expect("trace");
    for item in reader.by_ref() {
        if let trace::Item::Event(ev) = item.expect("item") {
            events += 1;
            if let Some(e) = engine.as_deref_mut() {
                e.event(&ev);
            }
        }
    }
    events
}

/// CPU time of this thread (immune to other processes' load on a shared
/// machine, unlike criterion's wall clock).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rate(events: u64, d: Duration) -> f64 {
    events as f64 / d.as_secs_f64() / 1e6
}

/// `NUMATRACE_BENCH_QUICK=1`: one run per case, no statistics.
fn quick() {
    let (events, folios) = (
        env_u64("NUMATRACE_BENCH_EVENTS", EVENTS),
        env_u64("NUMATRACE_BENCH_FOLIOS", FOLIOS),
    );
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let mut rates = Vec::new();
    for (name, specs) in CASES {
        if !wanted(name) {
            continue;
        }
        let (t0, wall) = (thread_cpu(), Instant::now());
        let engine = run(specs, events, folios);
        let cpu = thread_cpu() - t0;
        rates.push((name, rate(events, cpu)));
        println!(
            "{name:<12} {:>6.2} M events/s CPU ({:.2} s), {:>6.2} M events/s wall; state {:?}",
            rate(events, cpu),
            cpu.as_secs_f64(),
            rate(events, wall.elapsed()),
            engine.state_sizes()
        );
    }
    let of = |case: &str| rates.iter().find(|(n, _)| *n == case).map(|(_, r)| *r);
    if let (Some(all), Some(fc)) = (of("all-three"), of("fault-count")) {
        println!("goal figures: all-three {all:.2} M events/s CPU, fault-count alone {fc:.2} M events/s CPU");
    }
    if wanted("trace") {
        let bytes = trace_bytes(TRACE_EVENTS);
        let t0 = thread_cpu();
        let n = replay_trace(&bytes, None);
        let read = thread_cpu() - t0;
        let mut e = engine(&["fault-count"]);
        let t0 = thread_cpu();
        replay_trace(&bytes, Some(&mut e));
        let both = thread_cpu() - t0;
        println!(
            "trace        {:>6.2} M events/s CPU read+decode, {:>6.2} M events/s read+fault-count",
            rate(n, read),
            rate(n, both)
        );
    }
}

fn bench(c: &mut Criterion) {
    if std::env::var_os("NUMATRACE_BENCH_QUICK").is_some() {
        quick();
        std::process::exit(0);
    }
    let mut group = c.benchmark_group("replay_10M_events");
    group.sample_size(10);
    group.throughput(Throughput::Elements(EVENTS));
    for (name, specs) in CASES {
        group.bench_function(name, |b| b.iter(|| run(specs, EVENTS, FOLIOS)));
        let t0 = thread_cpu();
        let engine = run(specs, EVENTS, FOLIOS);
        eprintln!(
            "{name}: {:.2} M events/s of CPU time; tracked state after {EVENTS} events over {FOLIOS} folios: {:?}",
            rate(EVENTS, thread_cpu() - t0),
            engine.state_sizes()
        );
    }
    group.finish();

    let bytes = trace_bytes(TRACE_EVENTS);
    let mut group = c.benchmark_group("trace_read_1M_events");
    group.sample_size(10);
    group.throughput(Throughput::Elements(TRACE_EVENTS));
    group.bench_function("read-decode", |b| b.iter(|| replay_trace(&bytes, None)));
    group.bench_function("fault-count", |b| {
        b.iter(|| {
            let mut e = engine(&["fault-count"]);
            replay_trace(&bytes, Some(&mut e));
            e
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
