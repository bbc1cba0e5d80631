//! Any bytes as a trace file: the reader must refuse or read them, and the
//! models fed from it must not panic (overflow checks are on in fuzz builds).
#![no_main]
use libfuzzer_sys::fuzz_target;
use numa_core::{
    model::{
        policy::{build_all, KernelDefaults, ModelDefaults},
        shadow::Shadow,
        totals::Totals,
    },
    sink::Sink,
    trace::{Item, Reader},
};

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = Reader::new(data) else {
        return;
    };
    let k = KernelDefaults::from_tunables(&reader.header.tunables);
    let mut totals = Totals::new(reader.header.params.as_ref().map_or(1, |p| p.toptier_mask));
    let Ok(models) = build_all(&[], &ModelDefaults::default(), &k) else {
        return;
    };
    let mut shadow = Shadow::new(models, 4);
    for item in reader {
        match item {
            Ok(Item::Event(ev)) => {
                let _ = totals.event(&ev);
                let _ = shadow.event(&ev);
            }
            Ok(Item::Snapshot(s)) => {
                let _ = Sink::snapshot(&mut totals, &s);
                let _ = Sink::snapshot(&mut shadow, &s);
            }
            Ok(Item::Footer(_)) => {}
            Err(_) => break,
        }
    }
    let _ = totals.report(1 << 20, 0);
    let _ = shadow.report();
});
