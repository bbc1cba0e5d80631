//! TestBackend snapshots of every pane at 80x24 and 200x50: the empty
//! state, a replayed recording (table, histograms, detail, help) and the
//! drops/evictions warning.
use std::path::Path;

use ratatui::{backend::TestBackend, style::Color, Terminal};

use numa_core::model::policy::{build_all, KernelDefaults, ModelDefaults};

use crate::{
    action::Action,
    agg::{Aggregator, Focus, Vma},
    app::App,
    frame::Frame,
};

const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/testdata/hot-chunks-6.12.trace"
);
const SIZES: [(u16, u16); 2] = [(80, 24), (200, 50)];

/// The recording replayed in one go, published with `focus`.
fn replayed(focus: Focus, vmas: bool) -> Frame {
    let header = numa_core::trace::Reader::open(Path::new(TRACE))
        .expect("trace")
        .header;
    let k = KernelDefaults::from_host(&header.tunables, header.params.as_ref());
    let policies = build_all(&[], &ModelDefaults::default(), &k).expect("models");
    let mut agg = Aggregator::new(policies, &header, "replay hot-chunks-6.12.trace x1".into());
    numa_source::Source::File(TRACE.into())
        .run_blocking(None, &mut [&mut agg])
        .expect("replay");
    if vmas {
        agg.set_vmas(
            173,
            Some(vec![
                Vma {
                    start: 0x5555_6940_0000,
                    end: 0x5555_6960_0000,
                    perms: "r-xp".into(),
                    path: "/bin/numatrace".into(),
                },
                Vma {
                    start: 0x7fdb_d1a0_0000,
                    end: 0x7fdb_d9a0_0000,
                    perms: "rw-p".into(),
                    path: String::new(),
                },
            ]),
        );
    }
    agg.set_ended("end of trace".into());
    agg.publish(None, focus)
}

fn empty_frame() -> Frame {
    let header = numa_core::trace::Reader::open(Path::new(TRACE))
        .expect("trace")
        .header;
    let policies =
        build_all(&[], &ModelDefaults::default(), &KernelDefaults::default()).expect("models");
    let mut agg = Aggregator::new(policies, &header, "live".into());
    agg.publish(Some(1), Focus::default())
}

fn app_with(frame: Frame) -> App {
    let mut app = App::default();
    app.update(Action::Sample(Box::new(frame)));
    app
}

fn draw(app: &App, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
    t.draw(|f| f.render_widget(app, f.area())).expect("draw");
    t
}

fn text(t: &Terminal<TestBackend>) -> String {
    t.backend().to_string()
}

#[test]
fn empty_state() {
    let app = app_with(empty_frame());
    for (w, h) in SIZES {
        let t = draw(&app, w, h);
        let s = text(&t);
        assert!(s.contains("no hint faults yet"), "{s}");
        insta::assert_snapshot!(format!("empty_{w}x{h}"), t.backend());
    }
}

#[test]
fn replayed_table_and_histograms() {
    let mut app = app_with(replayed(Focus::default(), false));
    for (w, h) in SIZES {
        let t = draw(&app, w, h);
        let s = text(&t);
        assert!(s.contains("hot-chunks"), "{s}");
        assert!(s.contains("latency [all processes]"), "{s}");
        insta::assert_snapshot!(format!("table_{w}x{h}"), t.backend());
    }
    // Selecting the process focuses the histogram on it; `m` switches the
    // model column.
    app.update(Action::Down);
    app.update(Action::NextModel);
    let frame = replayed(app.focus(), false);
    app.update(Action::Sample(Box::new(frame)));
    for (w, h) in SIZES {
        let t = draw(&app, w, h);
        let s = text(&t);
        assert!(s.contains("[173 hot-chunks]"), "{s}");
        assert!(s.contains("fcount/s"), "{s}");
        insta::assert_snapshot!(format!("selected_{w}x{h}"), t.backend());
    }
}

#[test]
fn detail_view() {
    let mut app = app_with(replayed(Focus::default(), false));
    app.update(Action::Down);
    app.update(Action::Enter);
    assert_eq!(app.focus().detail_pid, Some(173));
    app.update(Action::Sample(Box::new(replayed(app.focus(), false))));
    for (w, h) in SIZES {
        let t = draw(&app, w, h);
        let s = text(&t);
        assert!(s.contains("address-space heat"), "{s}");
        assert!(s.contains("scanned ranges"), "{s}");
        insta::assert_snapshot!(format!("detail_replay_{w}x{h}"), t.backend());
    }
    // What became of its promotions, when reclaim demoted some again.
    let mut demoted = replayed(app.focus(), false);
    let d = demoted.detail.as_mut().expect("the detail of pid 173");
    d.trips = Some(numa_core::model::lifecycle::TripCounts {
        promotions: 40,
        pingpong: 3,
        demoted_by: [("direct".to_owned(), 0), ("kswapd".to_owned(), 5)].into(),
        ..Default::default()
    });
    app.update(Action::Sample(Box::new(demoted)));
    let s = text(&draw(&app, 200, 50));
    assert!(
        s.contains("promoted 40, demoted again: kswapd 5 │ ping-pong 3"),
        "{s}"
    );
    // Live: the VMAs from /proc/PID/maps with their scan coverage.
    app.update(Action::Sample(Box::new(replayed(app.focus(), true))));
    for (w, h) in SIZES {
        let t = draw(&app, w, h);
        let s = text(&t);
        assert!(s.contains("VMAs"), "{s}");
        assert!(s.contains("/bin/numatrace"), "{s}");
        insta::assert_snapshot!(format!("detail_vmas_{w}x{h}"), t.backend());
    }
}

#[test]
fn help_overlay_and_filter_prompt() {
    let mut app = app_with(replayed(Focus::default(), false));
    app.update(Action::ToggleHelp);
    for (w, h) in SIZES {
        let t = draw(&app, w, h);
        assert!(text(&t).contains("numatrace top: keys"));
        insta::assert_snapshot!(format!("help_{w}x{h}"), t.backend());
    }
    app.update(Action::ToggleHelp);
    app.update(Action::StartFilter);
    for c in "zzz".chars() {
        app.update(Action::FilterChar(c));
    }
    let t = draw(&app, 80, 24);
    let s = text(&t);
    assert!(s.contains("filter: zzz_"), "{s}");
    assert!(s.contains("no row matches the filter"), "{s}");
}

#[test]
fn the_cgroup_table_names_each_cgroup_and_lists_its_processes() {
    let mut app = app_with(replayed(Focus::default(), false));
    app.update(Action::ToggleCgroups);
    for (w, h) in SIZES {
        let t = draw(&app, w, h);
        let s = text(&t);
        assert!(s.contains("cgroups (1)") && s.contains("CGROUP"), "{s}");
        insta::assert_snapshot!(format!("cgroups_{w}x{h}"), t.backend());
    }
    app.update(Action::Down);
    app.update(Action::Enter);
    let s = text(&draw(&app, 200, 50));
    assert!(s.contains("processes (1) of id "), "{s}");
    assert!(s.contains("hot-chunks"), "{s}");
}

#[test]
fn drops_and_evictions_are_red() {
    let mut frame = replayed(Focus::default(), false);
    frame.warnings.ring_drops = 1234;
    frame.warnings.evictions = 56;
    frame.warnings.runs_missed = 9;
    let app = app_with(frame);
    for (w, h) in SIZES {
        let t = draw(&app, w, h);
        let buf = t.backend().buffer();
        let line: String = (0..w).map(|x| buf[(x, 3)].symbol().to_owned()).collect();
        assert!(line.starts_with("ring drops 1234"), "{line}");
        assert!(line.contains("runs missed 9"), "{line}");
        assert_eq!(buf[(0, 3)].fg, Color::Red);
        let ev = line.find("map evictions 56").expect("evictions shown");
        let ev_x = line[..ev].chars().count() as u16;
        assert_eq!(buf[(ev_x, 3)].fg, Color::Red);
        insta::assert_snapshot!(format!("warnings_{w}x{h}"), t.backend());
    }
    // Zero is not a warning.
    let app = app_with(replayed(Focus::default(), false));
    let t = draw(&app, 80, 24);
    assert_ne!(t.backend().buffer()[(0, 3)].fg, Color::Red);
}

#[test]
fn every_size_down_to_80x24_draws_without_overlap() {
    let mut app = app_with(replayed(Focus::default(), false));
    for (w, h) in [
        (80, 24),
        (100, 30),
        (132, 43),
        (200, 50),
        (300, 80),
        (60, 15),
        (20, 5),
    ] {
        let a = super::layout(ratatui::layout::Rect::new(0, 0, w, h), &app);
        let total =
            a.header.height + a.rates.height + a.table.height + a.hist.height + a.status.height;
        assert!(total <= h, "{w}x{h}: {a:?}");
        let t = draw(&app, w, h);
        assert_frame(&t, &a, w, h);
        if a.table.height >= 2 {
            let head = row(&t, a.table.y + 1);
            assert!(head.trim_start().starts_with("PID"), "{w}x{h}: {head:?}");
        }
        if w >= 80 && h >= 24 {
            assert!(a.table.height >= 5, "{w}x{h}: table {:?}", a.table);
        }
    }
    app.update(Action::Down);
    app.update(Action::Enter);
    for (w, h) in [(80, 24), (20, 5), (200, 50)] {
        let a = super::layout(ratatui::layout::Rect::new(0, 0, w, h), &app);
        let t = draw(&app, w, h);
        assert_frame(&t, &a, w, h);
        if a.table.height + a.hist.height >= 1 {
            let title = row(&t, a.table.y);
            assert!(
                title.starts_with("173 hot-chunks: detail"),
                "{w}x{h}: {title:?}"
            );
        }
    }
}

/// Row `y` of the screen as text.
fn row(t: &Terminal<TestBackend>, y: u16) -> String {
    let buf = t.backend().buffer();
    (0..buf.area.width)
        .map(|x| buf[(x, y)].symbol().to_owned())
        .collect()
}

/// The title starts the first row and the key help the last, at any size
/// (cut to the width).
fn assert_frame(t: &Terminal<TestBackend>, a: &super::Areas, w: u16, h: u16) {
    let title = row(t, 0);
    assert!(title.starts_with("numatrace top"), "{w}x{h}: {title:?}");
    assert_eq!(a.status.height, 1, "{w}x{h}: {a:?}");
    let keys = row(t, h - 1);
    assert!(keys.starts_with("q quit"), "{w}x{h}: {keys:?}");
}

#[test]
fn header_shows_a_running_promoter() {
    use numa_host::promoter_state::{NotRunning, PromoterState, Reading};
    let mut app = app_with(empty_frame());
    let four = super::layout(ratatui::layout::Rect::new(0, 0, 80, 24), &app).header;
    assert_eq!(four.height, 4, "no promoter line without a state file");
    app.promoter = Some(Reading::Running(Box::new(PromoterState {
        pid: 4242,
        scope: "pid 173".into(),
        moved_pages: 123_456,
        moved_bytes: 123_456 * 4096,
        moved_pages_per_s: 512.0,
        failures: 3,
        failures_by_status: [
            ("ebusy".to_owned(), 2),
            ("enomem".to_owned(), 1),
            ("efault".to_owned(), 0),
        ]
        .into_iter()
        .collect(),
        queue_depth: 17,
        rate_limit_bytes_per_s: 256 << 20,
        batch_ms: 20.0,
        batch_pages: 2048,
        ..PromoterState::default()
    })));
    for (w, h) in SIZES {
        let a = super::layout(ratatui::layout::Rect::new(0, 0, w, h), &app);
        assert_eq!(a.header.height, 5);
        let t = draw(&app, w, h);
        let s = text(&t);
        let line = s.lines().nth(4).unwrap_or_default();
        // Moved/s, failures and queue depth fit 80 columns.
        assert!(
            line.contains("promoter moved 512/s (123k, 482M) │ failures 3 │ queue 17 │"),
            "{line}"
        );
        if w >= 100 {
            assert!(
                line.contains("ebusy 2, enomem 1 │ pid 4242 (pid 173)"),
                "{line}"
            );
        }
        insta::assert_snapshot!(format!("promoter_{w}x{h}"), t.backend());
    }
    app.promoter = Some(Reading::NotRunning(NotRunning::Exited { pid: 4242 }));
    let t = draw(&app, 80, 24);
    let s = text(&t);
    assert!(
        s.lines()
            .nth(4)
            .is_some_and(|l| l.contains("promoter not running (pid 4242 exited)")),
        "{s}"
    );
    app.promoter = Some(Reading::NotRunning(NotRunning::NoFile));
    assert_eq!(
        super::layout(ratatui::layout::Rect::new(0, 0, 80, 24), &app).header,
        four
    );
}

/// A frame of one THP promoted in a second, with the recording's tiers
/// (node 1 below node 0).
fn thp_frame() -> Frame {
    let header = numa_core::trace::Reader::open(Path::new(TRACE))
        .expect("trace")
        .header;
    let mut agg = Aggregator::new(Vec::new(), &header, "live".into());
    let mut f =
        numa_core::decode::fixtures::fault(1, 1, 100, numa_ebpf_common::Outcome::PromoteHot);
    f.nr_pages = 512;
    f.flags |= numa_ebpf_common::fault_flags::MIGRATE_TRIED;
    f.migrate_ok = 1;
    let ts = f.ts_ns;
    agg.event(&numa_core::decode::Event::Fault(f));
    agg.publish(Some(ts + 1_000_000_000), Focus::default())
}

/// The rates say their unit, and a THP is one folio beside 512 pages.
#[test]
fn rates_say_their_unit_and_a_thp_is_512_pages() {
    let app = app_with(thp_frame());
    for (w, h) in SIZES {
        let s = text(&draw(&app, w, h));
        let has = |t: &str| s.contains(t);
        assert!(
            has("rates per second  folios (1 per hint fault); pg, vmstat: pages"),
            "{s}"
        );
        assert!(has("processes (1)  folios/s"), "{s}");
        assert!(has("(1 folios)"), "{s}");
        // A rate's label is padded to its column.
        let rate = |name: &str| {
            let label = format!("{name:<12} ");
            let at = s
                .find(&label)
                .unwrap_or_else(|| panic!("{name} not shown:\n{s}"));
            s[at + label.len()..]
                .split_whitespace()
                .next()
                .unwrap_or_default()
        };
        assert_eq!(rate("promoted pg"), "512", "{s}");
        assert_eq!(rate("decisions"), "1.0", "{s}");
        assert_eq!(rate("promoted"), "1.0", "{s}");
        assert_eq!(rate("vmstat promo"), "0", "{s}");
    }
}

#[test]
fn the_header_states_folio_sampling() {
    let mut frame = empty_frame();
    frame.header.folio_rate = 8;
    frame.header.folio_coverage = 0.125;
    let s = text(&draw(&app_with(frame), 200, 50));
    assert!(
        s.contains("folios 1/8 (12.5% of slow memory followed)"),
        "{s}"
    );
    let s = text(&draw(&app_with(empty_frame()), 200, 50));
    assert!(!s.contains("folios 1/"), "{s}");
}

/// Carriage return, a colour, a right-to-left override.
const HOSTILE: &str = "\r\x1b[31mEVIL\u{202e}!";

/// Whether `t`'s screen holds a character a terminal acts on.
fn terminal_controls(t: &Terminal<TestBackend>) -> Vec<String> {
    t.backend()
        .buffer()
        .content()
        .iter()
        .map(|c| c.symbol())
        .filter(|s| s.chars().any(|c| c.is_control() || c == '\u{202e}'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn names_from_other_processes_are_drawn_escaped() {
    let mut app = app_with(replayed(Focus::default(), false));
    app.update(Action::Down);
    app.update(Action::Enter);
    let mut frame = replayed(app.focus(), true);
    for p in &mut frame.processes {
        p.comm = HOSTILE.into();
    }
    frame.header.kernel = HOSTILE.into();
    frame.hist.title = format!("173 {HOSTILE}");
    let detail = frame.detail.as_mut().expect("the detail of pid 173");
    detail.comm = HOSTILE.into();
    for v in detail.vmas.iter_mut().flatten() {
        v.path = HOSTILE.into();
    }
    let escaped = "\\r\\x1b[31mEVIL";
    // The table and the header, then the detail view.
    app.update(Action::Back);
    app.update(Action::Sample(Box::new(frame.clone())));
    for (w, h) in SIZES {
        let t = draw(&app, w, h);
        assert_eq!(terminal_controls(&t), Vec::<String>::new(), "table {w}x{h}");
        assert!(text(&t).contains(escaped), "table {w}x{h}: {}", text(&t));
    }
    app.update(Action::Enter);
    app.update(Action::Sample(Box::new(frame)));
    for (w, h) in SIZES {
        let t = draw(&app, w, h);
        assert_eq!(
            terminal_controls(&t),
            Vec::<String>::new(),
            "detail {w}x{h}"
        );
        assert!(text(&t).contains(escaped), "detail {w}x{h}: {}", text(&t));
    }
}
