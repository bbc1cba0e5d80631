//! Replay throughput of the shadow engine: events/s on one core for each
//! model and for all three together, on a synthetic stream of 10 million
//! hint faults over 512 Ki distinct folios (decoded from raw records, as a
//! replay does). Memory is bounded by distinct folios, not stream length:
//! the bench prints the engine's tracked-state sizes after the run.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use numa_cli::{
    decode::{decode, raw_bytes, Event},
    model::{
        policy::{build, KernelDefaults, ModelDefaults},
        shadow::Shadow,
    },
};
use numa_ebpf_common::{fault_flags as ff, EventKind, FaultEvent, Outcome};

const EVENTS: u64 = 10_000_000;
const FOLIOS: u64 = 512 * 1024;

struct Gen(u64);
impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn event(i: u64, g: &mut Gen) -> FaultEvent {
    let r = g.next();
    let folio = r % FOLIOS;
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
        decision: if outcome.promoted() { 1 } else { 2 },
        flags: ff::HAS_STAMP | ff::DECIDED | ff::KERNEL_LATENCY | ff::HAS_FAULT_HOOK,
        comm: *b"bench\0\0\0\0\0\0\0\0\0\0\0",
        ..FaultEvent::default()
    }
}

fn run(specs: &[&str]) -> Shadow {
    let d = ModelDefaults::default();
    let k = KernelDefaults::default();
    let models = specs
        .iter()
        .map(|s| build(s, &d, &k).expect("model spec"))
        .collect();
    let mut engine = Shadow::new(models, 10);
    let mut g = Gen(0x9E37_79B9_7F4A_7C15);
    for i in 0..EVENTS {
        let ev = Event::Fault(event(i, &mut g));
        let ev = decode(raw_bytes(&ev)).expect("decodes");
        engine.event(&ev);
    }
    engine
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("replay_10M_events");
    group.sample_size(10);
    group.throughput(Throughput::Elements(EVENTS));
    for (name, specs) in [
        ("fault-count", &["fault-count"][..]),
        ("kernel-time", &["kernel-time"][..]),
        ("two-touch", &["two-touch"][..]),
        (
            "all-three",
            &["kernel-time", "fault-count", "two-touch"][..],
        ),
    ] {
        group.bench_function(name, |b| b.iter(|| run(specs)));
        let engine = run(specs);
        eprintln!(
            "{name}: tracked state after {EVENTS} events over {FOLIOS} folios: {:?}",
            engine.state_sizes()
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
