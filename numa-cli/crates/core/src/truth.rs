//! The truth file: every user-space load and store the guest made, per
//! guest-physical 4 KiB page and per window of the guest's CLOCK_MONOTONIC
//! (the trace's clock), as the test bed's QEMU plugin counts them.
//!
//! Two stages. The plugin (`xtask/truth-plugin`) cannot read the guest's
//! clock, so a guest process (`numatrace workload ticker`) cuts the
//! windows: it reads CLOCK_MONOTONIC, stores to a marker page at a fixed
//! virtual address, and reads the clock again; the plugin starts a new
//! window at each such store and writes the *raw* file (page counts keyed
//! by window index, [`RAW_MAGIC`]). After the run the host joins it with
//! the ticker's log of clock readings ([`assemble`]) into the *truth* file
//! ([`TRUTH_MAGIC`]): the windows' bounds in guest nanoseconds, then the
//! page counts. A window's bounds are uncertain by the time between the
//! two clock reads around its ticks (`clock_err_ns`).
//!
//! All integers little-endian. Raw: magic, then [`PageCount`] records in
//! window order, a record with `pfn == TICK` opening each window. Truth:
//! magic, `u32` window count, `u32` zero, that many [`Window`]s (three
//! `u64`), then [`PageCount`] records sorted by window, then page.
use std::io::{self, BufRead, Read, Write};

use anyhow::{bail, ensure, Context, Result};

pub const RAW_MAGIC: &[u8; 8] = b"NTTRRAW1";
pub const TRUTH_MAGIC: &[u8; 8] = b"NTTRUTH1";

/// The guest virtual address of the marker word: a store there by a
/// user-space instruction opens a window. Above where Linux places
/// mappings by default on x86-64 with 47-bit addresses, below the stack.
pub const MARKER_ADDR: u64 = 0x7e57_0000_0000;

/// The plugin's statistics (accesses it could not place, its error) go
/// to the raw file's path with this appended.
pub const STATS_SUFFIX: &str = ".stats";

/// The `pfn` of a raw record that opens a window.
pub const TICK: u32 = u32::MAX;

/// Windows a truth file may hold: a day of 100 ms windows. A file that
/// claims more is refused before anything is allocated for it.
pub const MAX_WINDOWS: u32 = 864_000;

/// One page's accesses in one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCount {
    pub window: u32,
    pub pfn: u32,
    pub loads: u32,
    pub stores: u32,
}

impl PageCount {
    pub const SIZE: usize = 16;

    pub fn to_bytes(self) -> [u8; Self::SIZE] {
        let mut b = [0; Self::SIZE];
        for (i, v) in [self.window, self.pfn, self.loads, self.stores]
            .into_iter()
            .enumerate()
        {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> PageCount {
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        PageCount {
            window: w(0),
            pfn: w(4),
            loads: w(8),
            stores: w(12),
        }
    }

    pub fn accesses(self) -> u64 {
        u64::from(self.loads) + u64::from(self.stores)
    }
}

/// One window of guest time, `[start_ns, end_ns)` of CLOCK_MONOTONIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
    /// How far the true cut may lie from `start_ns` or `end_ns`.
    pub clock_err_ns: u64,
}

/// One line of the ticker's log: tick `index` stored to the marker page
/// between the two clock readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    pub index: u32,
    pub before_ns: u64,
    pub after_ns: u64,
}

impl Tick {
    /// The ticker's log line: "index before_ns after_ns".
    pub fn line(&self) -> String {
        format!("{} {} {}", self.index, self.before_ns, self.after_ns)
    }

    /// A line as [`line`](Self::line) writes it.
    pub fn parse(line: &str) -> Result<Tick> {
        let mut it = line.split_ascii_whitespace().map(str::parse::<u64>);
        let mut next = |what: &str| -> Result<u64> {
            it.next()
                .with_context(|| format!("no {what}"))?
                .with_context(|| format!("{what} is not a number"))
        };
        let tick = Tick {
            index: u32::try_from(next("tick index")?).context("tick index past u32")?,
            before_ns: next("first clock reading")?,
            after_ns: next("second clock reading")?,
        };
        ensure!(
            tick.before_ns <= tick.after_ns,
            "the clock went back across the marker store"
        );
        Ok(tick)
    }
}

/// The windows between consecutive ticks (tick k opens window k; the last
/// tick only closes one).
pub fn windows(ticks: &[Tick]) -> Result<Vec<Window>> {
    for (i, t) in ticks.iter().enumerate() {
        ensure!(
            t.index as usize == i,
            "tick {} where tick {i} was expected: the ticker's log is not whole",
            t.index
        );
    }
    ensure!(
        ticks.len() <= MAX_WINDOWS as usize,
        "{} ticks: more than the {MAX_WINDOWS} windows a truth file holds",
        ticks.len()
    );
    Ok(ticks
        .windows(2)
        .map(|p| Window {
            start_ns: p[0].before_ns,
            end_ns: p[1].after_ns,
            clock_err_ns: (p[0].after_ns - p[0].before_ns).max(p[1].after_ns - p[1].before_ns),
        })
        .collect())
}

/// What [`assemble`] wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Assembled {
    pub windows: u32,
    pub records: u64,
    pub accesses: u64,
    /// Records of a window the ticker did not close (after its last
    /// tick): dropped.
    pub dropped_records: u64,
    /// The largest `clock_err_ns` of any window.
    pub clock_err_ns: u64,
}

/// Joins the plugin's raw file with the ticker's log into a truth file.
/// Fails when the two disagree on the number of ticks.
pub fn assemble(raw: impl Read, ticks: &[Tick], mut out: impl Write) -> Result<Assembled> {
    let windows = windows(ticks)?;
    let mut raw = io::BufReader::new(raw);
    let mut magic = [0; 8];
    raw.read_exact(&mut magic)
        .context("raw truth file: no header")?;
    ensure!(&magic == RAW_MAGIC, "not a raw truth file (bad magic)");
    let n = write_header(&mut out, &windows)?;
    let mut done = Assembled {
        windows: n,
        clock_err_ns: windows.iter().map(|w| w.clock_err_ns).max().unwrap_or(0),
        ..Assembled::default()
    };
    let mut seen_ticks = 0u64;
    while let Some(r) = next_record(&mut raw)? {
        if r.pfn == TICK {
            ensure!(
                u64::from(r.window) == seen_ticks,
                "raw truth file: window {} opened after {seen_ticks} ticks",
                r.window
            );
            seen_ticks += 1;
        } else if r.window < n {
            out.write_all(&r.to_bytes())?;
            done.records += 1;
            done.accesses += r.accesses();
        } else {
            done.dropped_records += 1;
        }
    }
    ensure!(
        seen_ticks == ticks.len() as u64,
        "the plugin saw {seen_ticks} ticks and the ticker logged {}: \
         another process stored to the marker page, or a tick was lost",
        ticks.len()
    );
    out.flush()?;
    Ok(done)
}

/// A truth file's head: its magic, the window count and the windows.
fn write_header(out: &mut impl Write, windows: &[Window]) -> Result<u32> {
    let n = u32::try_from(windows.len()).context("too many windows")?;
    out.write_all(TRUTH_MAGIC)?;
    out.write_all(&n.to_le_bytes())?;
    out.write_all(&0u32.to_le_bytes())?;
    for w in windows {
        for v in [w.start_ns, w.end_ns, w.clock_err_ns] {
            out.write_all(&v.to_le_bytes())?;
        }
    }
    Ok(n)
}

/// A whole truth file in memory: `windows`, then `counts` (in the file's
/// order: by window, then page).
pub fn encode(windows: &[Window], counts: &[PageCount]) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    write_header(&mut v, windows)?;
    for c in counts {
        v.extend_from_slice(&c.to_bytes());
    }
    Ok(v)
}

/// The next record, `None` at the end; a torn record is an error.
fn next_record(r: &mut impl BufRead) -> Result<Option<PageCount>> {
    let mut b = [0; PageCount::SIZE];
    let mut got = 0;
    while got < b.len() {
        match r.read(&mut b[got..])? {
            0 if got == 0 => return Ok(None),
            0 => bail!("truth file ends inside a record"),
            n => got += n,
        }
    }
    Ok(Some(PageCount::from_bytes(&b)))
}

/// A truth file being read: its windows, then its records one by one.
pub struct TruthReader<R> {
    pub windows: Vec<Window>,
    input: io::BufReader<R>,
}

impl<R: Read> TruthReader<R> {
    pub fn new(input: R) -> Result<TruthReader<R>> {
        let mut input = io::BufReader::new(input);
        let mut head = [0; 16];
        input
            .read_exact(&mut head)
            .context("truth file: no header")?;
        ensure!(
            &head[..8] == TRUTH_MAGIC,
            "not a truth file (bad magic): write one with `cargo xtask vm --truth FILE`"
        );
        let n = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        ensure!(
            n <= MAX_WINDOWS,
            "truth file claims {n} windows, more than the {MAX_WINDOWS} allowed"
        );
        let mut windows = Vec::new();
        for i in 0..n {
            let mut w = [0; 24];
            input
                .read_exact(&mut w)
                .with_context(|| format!("truth file ends in window {i} of {n}"))?;
            let v = |k: usize| {
                let mut b = [0; 8];
                b.copy_from_slice(&w[k * 8..k * 8 + 8]);
                u64::from_le_bytes(b)
            };
            windows.push(Window {
                start_ns: v(0),
                end_ns: v(1),
                clock_err_ns: v(2),
            });
        }
        Ok(TruthReader { windows, input })
    }

    /// The next page count; a record naming a window the file does not
    /// have is an error.
    pub fn next_count(&mut self) -> Result<Option<PageCount>> {
        let Some(r) = next_record(&mut self.input)? else {
            return Ok(None);
        };
        ensure!(
            (r.window as usize) < self.windows.len(),
            "truth file: a record of window {} of {}",
            r.window,
            self.windows.len()
        );
        Ok(Some(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(records: &[PageCount]) -> Vec<u8> {
        let mut v = RAW_MAGIC.to_vec();
        for r in records {
            v.extend_from_slice(&r.to_bytes());
        }
        v
    }

    fn rec(window: u32, pfn: u32, loads: u32, stores: u32) -> PageCount {
        PageCount {
            window,
            pfn,
            loads,
            stores,
        }
    }

    fn tick(index: u32, before_ns: u64, after_ns: u64) -> Tick {
        Tick {
            index,
            before_ns,
            after_ns,
        }
    }

    #[test]
    fn assembled_file_reads_back_with_its_windows() {
        let ticks = [tick(0, 100, 103), tick(1, 1100, 1110), tick(2, 2100, 2101)];
        let input = raw(&[
            rec(0, TICK, 0, 0),
            rec(0, 7, 3, 1),
            rec(0, 9, 0, 2),
            rec(1, TICK, 0, 0),
            rec(1, 7, 5, 0),
            rec(2, TICK, 0, 0),
            rec(2, 8, 1, 1),
        ]);
        let mut out = Vec::new();
        let done = assemble(&input[..], &ticks, &mut out).expect("assemble");
        assert_eq!(
            done,
            Assembled {
                windows: 2,
                records: 3,
                accesses: 11,
                dropped_records: 1,
                clock_err_ns: 10,
            }
        );
        let mut r = TruthReader::new(&out[..]).expect("header");
        assert_eq!(
            r.windows,
            vec![
                Window {
                    start_ns: 100,
                    end_ns: 1110,
                    clock_err_ns: 10
                },
                Window {
                    start_ns: 1100,
                    end_ns: 2101,
                    clock_err_ns: 10
                },
            ]
        );
        let mut got = Vec::new();
        while let Some(c) = r.next_count().expect("record") {
            got.push(c);
        }
        assert_eq!(got, vec![rec(0, 7, 3, 1), rec(0, 9, 0, 2), rec(1, 7, 5, 0)]);
    }

    #[test]
    fn a_tick_count_that_differs_from_the_log_is_refused() {
        let ticks = [tick(0, 1, 2), tick(1, 3, 4)];
        let input = raw(&[rec(0, TICK, 0, 0), rec(0, 5, 1, 0)]);
        let err = assemble(&input[..], &ticks, Vec::new()).expect_err("one tick short");
        assert!(err.to_string().contains("saw 1 ticks"), "{err}");
    }

    #[test]
    fn a_log_with_a_gap_is_refused() {
        let err = windows(&[tick(0, 1, 2), tick(2, 3, 4)]).expect_err("gap");
        assert!(err.to_string().contains("not whole"), "{err}");
    }

    #[test]
    fn bad_lines_and_files_get_errors_not_panics() {
        assert!(Tick::parse("1 2").is_err());
        assert!(Tick::parse("1 5 4").is_err());
        assert!(Tick::parse("x 1 2").is_err());
        assert_eq!(Tick::parse("3 10 12").expect("ok"), tick(3, 10, 12));
        assert_eq!(
            Tick::parse(&tick(3, 10, 12).line()).expect("ok"),
            tick(3, 10, 12)
        );
        assert!(TruthReader::new(&b"NTTRUTH1"[..]).is_err());
        let mut huge = TRUTH_MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&[0; 4]);
        let err = TruthReader::new(&huge[..]).err().expect("too many windows");
        assert!(err.to_string().contains("more than"), "{err}");
        let mut torn = TRUTH_MAGIC.to_vec();
        torn.extend_from_slice(&[0; 8]);
        torn.extend_from_slice(&[1, 2, 3]);
        let mut r = TruthReader::new(&torn[..]).expect("no windows");
        assert!(r.next_count().is_err());
    }
}
