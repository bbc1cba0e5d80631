//! The page of several traces (hosts, runs): a summary table with one
//! column per trace, then every chart row split into one column per trace,
//! each labelled with the trace's file name and kernel.
use std::fmt::Write as _;

use super::{
    charts::{Svg, TITLES},
    html::{esc, style},
    Trace,
};

/// Writes the whole page but its closing note.
pub(super) fn write(h: &mut String, traces: &[Trace], charts: &[[Svg; 7]]) {
    // Columns share the row; their charts scale down to them (the SVGs
    // have a viewBox), and many columns scroll sideways rather than shrink
    // past reading.
    let _ = write!(
        h,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>numatrace report ({n} traces)</title>{}\
         <style>body{{padding:0 1.5em}}.row{{display:flex;gap:8px;overflow-x:auto}}\
         .row .chart{{flex:1 0 420px;min-width:0}}.row svg{{width:100%;height:auto}}\
         .label{{font-weight:bold;margin:4px 0}}</style></head><body>\
         <h1>numatrace report: {n} traces side by side</h1>\
         <p class=\"note\">Each row of charts shares its axes across the columns.</p>",
        style("none"),
        n = traces.len(),
    );
    for t in traces {
        if let Some(w) = &t.g.warning {
            let _ = write!(h, "<p><b>warning:</b> {}: {}</p>", esc(&label(t)), esc(w));
        }
    }
    write_summary(h, traces);
    for (i, title) in TITLES.iter().enumerate() {
        let _ = write!(h, "<h2>{}</h2><div class=\"row\">", esc(title));
        for (t, svgs) in traces.iter().zip(charts) {
            let _ = write!(
                h,
                "<div class=\"chart\"><p class=\"label\">{}</p>{}</div>",
                esc(&label(t)),
                svgs[i]
            );
        }
        h.push_str("</div>");
    }
}

/// A trace's column heading: its file name and the kernel it ran on.
fn label(t: &Trace) -> String {
    let name = t.path.file_name().unwrap_or(t.path.as_os_str());
    format!(
        "{} \u{b7} kernel {}",
        name.to_string_lossy(),
        t.header.kernel_release
    )
}

/// One row of the summary: a heading and a cell per trace.
type Row = (String, Vec<String>);

/// The run's figures, the kernel's promotions, then each model's.
fn write_summary(h: &mut String, traces: &[Trace]) {
    let row = |name: &str, cell: &dyn Fn(&Trace) -> String| -> Row {
        (name.to_owned(), traces.iter().map(cell).collect())
    };
    let mut rows: Vec<Row> = vec![
        row("trace", &|t| t.path.display().to_string()),
        row("duration (s)", &|t| format!("{:.1}", t.g.stats.duration_s)),
        row("hint faults (folios / pages)", &|t| {
            let s = &t.g.stats;
            format!("{} / {}", s.hint_faults, s.pages.hint_faults)
        }),
        row("decisions (folios / pages)", &|t| {
            let s = &t.g.stats;
            format!("{} / {}", s.decisions, s.pages.decisions)
        }),
        row("ring drops", &|t| t.g.stats.drops.to_string()),
        row("kernel promoted (folios / pages)", &|t| {
            let k = &t.g.models.kernel;
            format!("{} / {}", k.promote, k.promote_pages)
        }),
        row("migrations ok / failed (folios)", &|t| {
            let k = &t.g.models.kernel;
            format!("{} / {}", k.migrate_success, k.migrate_fail)
        }),
        row("migrations ok / failed (pages)", &|t| {
            let k = &t.g.models.kernel;
            format!("{} / {}", k.migrate_success_pages, k.migrate_fail_pages)
        }),
    ];
    // Every trace ran the same model specs, in the same order.
    let names: Vec<String> = traces
        .first()
        .map(|t| t.g.models.models.iter().map(|m| m.name.clone()).collect())
        .unwrap_or_default();
    for (i, name) in names.iter().enumerate() {
        rows.push(row(
            &format!("{name} would promote (folios / pages)"),
            &|t| {
                let m = t.g.models.models.get(i);
                m.map_or("-".into(), |m| {
                    format!("{} / {}", m.promote, m.projected.promote_pages)
                })
            },
        ));
        rows.push(row(&format!("{name} agreement % (folios / pages)"), &|t| {
            let m = t.g.models.models.get(i);
            m.map_or("-".into(), |m| {
                format!("{:.1} / {:.1}", m.agreement_pct, m.agreement_pages_pct)
            })
        }));
    }
    h.push_str("<h2>Summary</h2><table><tr><th></th>");
    for t in traces {
        let _ = write!(h, "<th>{}</th>", esc(&label(t)));
    }
    h.push_str("</tr>");
    for (name, cells) in rows {
        let _ = write!(h, "<tr><th>{}</th>", esc(&name));
        for c in cells {
            let _ = write!(h, "<td>{}</td>", esc(&c));
        }
        h.push_str("</tr>");
    }
    let note = traces.first().map_or("", |t| &t.g.models.evidence_note);
    let _ = write!(h, "</table><p class=\"note\">{}</p>", esc(note));
}
