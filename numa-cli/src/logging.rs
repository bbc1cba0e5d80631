//! The one logger: every message numatrace prints besides a command's own
//! output, userspace's and the BPF programs' (aya-log) alike, goes through
//! the `log` facade to here, and from here to stderr or the journal.
//!
//! - Level: info by default, `-q` errors only, `-v` debug, `-vv` trace;
//!   `RUST_LOG` (env_logger's syntax, e.g. `warn,numa_probe=debug`)
//!   replaces the flags when set, as for any Rust tool.
//! - Destination: the journal when stderr is the journal stream systemd
//!   gave the service (`$JOURNAL_STREAM`, systemd.exec(5)), with each
//!   message's priority; stderr otherwise, in the `numatrace: warning: ...`
//!   form that scripts and tests read.
use std::io::Write;

use anyhow::{bail, Result};
use log::{Level, LevelFilter, Log, Metadata, Record};
use systemd_journal_logger::JournalLog;

/// Where messages go.
enum Destination {
    Stderr,
    Journal(JournalLog),
}

struct Logger {
    filter: env_filter::Filter,
    to: Destination,
}

/// The BPF programs' records carry the module of the program that logged
/// them (aya-log's target): they are the probes' messages.
const BPF_TARGET_PREFIX: &str = "numa_ebpf";

/// The prefix of every crate of numatrace's (`numatrace`, `numa_core`,
/// `numa_probe`, ..., the BPF programs' `numa_ebpf`): filter directives
/// match targets by prefix.
const OUR_CRATES: &str = "numa";

/// The filter for `-v` counted `verbose` times or `-q`, unless `rust_log`
/// (the `RUST_LOG` value) is set; a malformed `RUST_LOG` is an error that
/// shows a valid one.
fn filter(verbose: u8, quiet: bool, rust_log: Option<&str>) -> Result<env_filter::Filter> {
    let mut b = env_filter::Builder::new();
    match rust_log.filter(|s| !s.trim().is_empty()) {
        Some(spec) => {
            if let Err(e) = b.try_parse(spec) {
                bail!(
                    "RUST_LOG={spec:?} is not a log filter ({e}); use a level (error, warn, info, \
                     debug, trace) or module=level pairs, e.g. RUST_LOG=warn,numa_probe=debug"
                );
            }
        }
        None => {
            // -v is about numatrace: its dependencies (aya's loader traces
            // every relocation at debug) speak up one step later.
            let (ours, theirs) = match (quiet, verbose) {
                (true, _) => (LevelFilter::Error, LevelFilter::Error),
                (false, 0) => (LevelFilter::Info, LevelFilter::Info),
                (false, 1) => (LevelFilter::Debug, LevelFilter::Info),
                (false, _) => (LevelFilter::Trace, LevelFilter::Debug),
            };
            b.filter_level(theirs).filter_module(OUR_CRATES, ours);
        }
    }
    Ok(b.build())
}

/// One stderr line: the `numatrace:` prefix, the level word where it is
/// not plain information, the probes marked as such, and for debug and
/// trace the module the message came from.
fn line(record: &Record) -> String {
    let from_bpf = record.target().starts_with(BPF_TARGET_PREFIX);
    let level = match record.level() {
        Level::Error => "error: ",
        Level::Warn => "warning: ",
        Level::Info => "",
        Level::Debug => "debug: ",
        Level::Trace => "trace: ",
    };
    let origin = match (from_bpf, record.level()) {
        (true, _) => "probe: ".to_string(),
        (false, Level::Debug | Level::Trace) => format!("[{}] ", record.target()),
        _ => String::new(),
    };
    format!("numatrace: {level}{origin}{}", record.args())
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record) {
        if self.filter.matches(record) {
            self.write(record);
        }
    }

    fn flush(&self) {}
}

impl Logger {
    /// Writes `record` whatever the filter says. A message that cannot be
    /// written has nowhere else to go, so it is dropped.
    fn write(&self, record: &Record) {
        match &self.to {
            Destination::Journal(j) => {
                if j.journal_send(record).is_ok() {
                    return;
                }
                let _ = writeln!(std::io::stderr().lock(), "{}", line(record));
            }
            Destination::Stderr => {
                let _ = writeln!(std::io::stderr().lock(), "{}", line(record));
            }
        }
    }
}

/// Installs the logger for the process, from the command line's `-v`/`-q`
/// and `RUST_LOG`. Call once, before anything logs.
pub(crate) fn init(verbose: u8, quiet: bool) -> Result<()> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(verbose, quiet, rust_log.as_deref())?;
    let to = if systemd_journal_logger::connected_to_journal() {
        match JournalLog::empty() {
            Ok(j) => Destination::Journal(j.with_syslog_identifier("numatrace".into())),
            Err(_) => Destination::Stderr,
        }
    } else {
        Destination::Stderr
    };
    log::set_max_level(filter.filter());
    log::set_boxed_logger(Box::new(Logger { filter, to }))?;
    Ok(())
}

/// Reports the error that ends the run: always shown, whatever the filter
/// (even `-q` or `RUST_LOG=off`), through the same destination.
pub(crate) fn fatal(e: &anyhow::Error) {
    always(format_args!("{e:#}"));
}

fn always(args: std::fmt::Arguments) {
    let record = Record::builder()
        .level(Level::Error)
        .target("numatrace")
        .args(args)
        .build();
    if log::logger().enabled(record.metadata()) {
        log::logger().log(&record);
    } else {
        let _ = writeln!(std::io::stderr().lock(), "{}", line(&record));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(level: Level, target: &str) -> Metadata<'_> {
        Metadata::builder().level(level).target(target).build()
    }

    #[test]
    fn flags_set_the_level_and_rust_log_replaces_them() {
        let default = filter(0, false, None).expect("filter");
        assert!(default.enabled(&meta(Level::Info, "numa_cli")));
        assert!(!default.enabled(&meta(Level::Debug, "numa_cli")));
        let quiet = filter(0, true, None).expect("filter");
        assert!(!quiet.enabled(&meta(Level::Warn, "numa_cli")));
        assert!(quiet.enabled(&meta(Level::Error, "numa_cli")));
        let v = filter(1, false, None).expect("filter");
        assert!(v.enabled(&meta(Level::Debug, "numa_probe::load")));
        assert!(v.enabled(&meta(Level::Debug, "numatrace")));
        assert!(!v.enabled(&meta(Level::Debug, "aya_obj::relocation")));
        let vv = filter(2, false, None).expect("filter");
        assert!(vv.enabled(&meta(Level::Trace, "numa_probe")));
        assert!(vv.enabled(&meta(Level::Debug, "aya_obj::relocation")));
        assert!(!vv.enabled(&meta(Level::Trace, "aya_obj::relocation")));
        let env = filter(2, false, Some("warn,numa_probe=debug")).expect("filter");
        assert!(env.enabled(&meta(Level::Debug, "numa_probe::load")));
        assert!(!env.enabled(&meta(Level::Info, "numa_cli")));
        // An empty RUST_LOG is unset, as env_logger treats it.
        let empty = filter(0, true, Some(" ")).expect("filter");
        assert!(!empty.enabled(&meta(Level::Warn, "numa_cli")));
    }

    #[test]
    fn a_malformed_rust_log_is_refused_with_an_example() {
        let e = filter(0, false, Some("numa_probe=loud")).expect_err("refused");
        let msg = format!("{e:#}");
        assert!(msg.contains("RUST_LOG=\"numa_probe=loud\""), "{msg}");
        assert!(msg.contains("e.g. RUST_LOG=warn,numa_probe=debug"), "{msg}");
    }

    #[test]
    fn stderr_lines_keep_the_numatrace_prefix_and_mark_the_probes() {
        let warn = Record::builder()
            .level(Level::Warn)
            .target("numa_source::live")
            .args(format_args!("ring full"))
            .build();
        assert_eq!(line(&warn), "numatrace: warning: ring full");
        let info = Record::builder()
            .level(Level::Info)
            .target("numa_cli")
            .args(format_args!("wrote x"))
            .build();
        assert_eq!(line(&info), "numatrace: wrote x");
        let bpf = Record::builder()
            .level(Level::Warn)
            .target("numa_ebpf::decision")
            .args(format_args!("numa_balancing is 1 now"))
            .build();
        assert_eq!(
            line(&bpf),
            "numatrace: warning: probe: numa_balancing is 1 now"
        );
        let debug = Record::builder()
            .level(Level::Debug)
            .target("numa_probe::load")
            .args(format_args!("attached"))
            .build();
        assert_eq!(
            line(&debug),
            "numatrace: debug: [numa_probe::load] attached"
        );
    }
}
