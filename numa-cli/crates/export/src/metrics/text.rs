//! The classic Prometheus text format (0.0.4), converted from the
//! OpenMetrics encoding, and the choice between the two per request.
use std::fmt::Write as _;

/// Content type of the OpenMetrics exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the classic Prometheus text exposition.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Converts `prometheus-client`'s OpenMetrics output to the classic text
/// format (0.0.4), which differs only in metadata: `# TYPE`/`# HELP` name
/// the sample (`x_total` for counters, `x_info` for info, which becomes a
/// gauge; `unknown` becomes `untyped`), and there is no `# UNIT` or `# EOF`.
/// Sample lines are identical in both formats.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut pending_help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            pending_help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (sample_name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_owned(), "untyped"),
                k => (name.to_owned(), k),
            };
            if let Some((help_name, help)) = pending_help.take() {
                if help_name == name {
                    let _ = writeln!(out, "# HELP {sample_name} {help}");
                }
            }
            let _ = writeln!(out, "# TYPE {sample_name} {kind}");
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Which exposition a client asked for, from its `Accept` header: OpenMetrics
/// when it accepts `application/openmetrics-text` at least as much as
/// `text/plain` (what Prometheus sends), the classic text format otherwise
/// (no header, `*/*`, `text/plain`: curl, browsers, older scrapers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Prometheus,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Prometheus => PROMETHEUS_CONTENT_TYPE,
        }
    }

    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        let (mut om, mut text) = (0.0f64, 0.0f64);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let mut q = 1.0;
            let mut version_ok = true;
            for p in parts {
                let Some((k, v)) = p.split_once('=') else {
                    continue;
                };
                match k.trim().to_ascii_lowercase().as_str() {
                    "q" => q = v.trim().parse().unwrap_or(0.0),
                    "version" if media == "application/openmetrics-text" => {
                        version_ok = matches!(v.trim(), "1.0.0" | "0.0.1");
                    }
                    _ => {}
                }
            }
            match media.as_str() {
                "application/openmetrics-text" if version_ok => om = om.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if om > 0.0 && om >= text {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }
}
