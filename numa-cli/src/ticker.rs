//! `numatrace workload ticker`: cuts the test bed plugin's windows on the
//! guest's CLOCK_MONOTONIC (the trace's clock). The plugin sees a store to
//! the marker page and nothing else of the guest's time; the log pairs
//! each store with the clock read just before and just after it.
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{ensure, Result};
use numa_core::truth::{Tick, MARKER_ADDR, MAX_WINDOWS};
use numa_host::clock::monotonic_ns;

use crate::cli::TickerArgs;

pub(crate) fn run(a: &TickerArgs) -> Result<ExitCode> {
    let marker = Marker::map()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let log = rt.block_on(tick_until_stopped(&marker, a.every_ms))?;
    crate::write_output(Some(&a.log), log.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

async fn tick_until_stopped(marker: &Marker, every_ms: u64) -> Result<String> {
    let mut signals = numa_source::signals::Signals::new()?;
    let every = Duration::from_millis(every_ms);
    let start = tokio::time::Instant::now();
    let mut log = String::new();
    for index in 0..MAX_WINDOWS {
        // Infallible: writing to a String.
        let _ = writeln!(log, "{}", marker.tick(index).line());
        let next = start + every * (index + 1);
        tokio::select! {
            _ = signals.recv() => {
                let _ = writeln!(log, "{}", marker.tick(index + 1).line());
                return Ok(log);
            }
            _ = tokio::time::sleep_until(next) => {}
        }
    }
    anyhow::bail!("{MAX_WINDOWS} ticks: the most a truth file holds; tick less often (--every-ms)")
}

/// The marker page, mapped at the address the plugin watches.
struct Marker(*mut u32);

impl Marker {
    fn map() -> Result<Marker> {
        // SAFETY: a fresh anonymous mapping; MAP_FIXED_NOREPLACE never
        // replaces one that exists.
        let p = unsafe {
            libc::mmap(
                MARKER_ADDR as *mut libc::c_void,
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        ensure!(
            p != libc::MAP_FAILED,
            "cannot map the marker page at {MARKER_ADDR:#x}: {} (another mapping there?)",
            std::io::Error::last_os_error()
        );
        ensure!(
            p as u64 == MARKER_ADDR,
            "the kernel placed the marker page at {p:p}, not {MARKER_ADDR:#x} (a kernel without MAP_FIXED_NOREPLACE?)"
        );
        let p = p.cast::<u32>();
        // The first store faults the page in: done here, not inside a
        // tick's two clock reads.
        // SAFETY: `p` is a writable page of ours.
        unsafe { p.add(1).write_volatile(0) };
        Ok(Marker(p))
    }

    /// One tick: the store the plugin sees, between two clock reads.
    fn tick(&self, index: u32) -> Tick {
        let before_ns = monotonic_ns();
        // SAFETY: the page is mapped writable for the process's life.
        unsafe { self.0.write_volatile(index) };
        Tick {
            index,
            before_ns,
            after_ns: monotonic_ns(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_stores_its_index_between_two_clock_reads() {
        let m = Marker::map().expect("the marker page (no other test maps it)");
        let t = m.tick(7);
        assert!(t.before_ns <= t.after_ns);
        // SAFETY: mapped by `map`.
        assert_eq!(unsafe { m.0.read_volatile() }, 7);
        assert_eq!(Tick::parse(&t.line()).expect("parse"), t);
        assert!(Marker::map().is_err(), "the address is taken now");
    }
}
