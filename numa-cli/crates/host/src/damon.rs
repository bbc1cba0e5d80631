//! A kdamond of numatrace's own, through DAMON's sysfs interface
//! (`/sys/kernel/mm/damon/admin`): physical-address operations over the
//! memory nodes' spans, the sampled truth of which pages are accessed.
//!
//! DAMON's sysfs has one list of kdamonds, and setting its length
//! (`nr_kdamonds`) rebuilds every entry: a tool that resized it would
//! reconfigure kdamonds someone else set up (damo, memtierd). So numatrace
//! starts one only when the list is empty, and refuses otherwise. It stops
//! its own (state `off`, the list emptied) when the [`Kdamond`] is dropped,
//! which every exit path that runs destructors does: the end of the run, an
//! error, a stop signal (commands that start one stop cleanly on SIGINT,
//! SIGTERM and SIGHUP) and a panic. It touches the list at the end only if
//! entry 0 is still the kdamond it started.
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
pub use numa_core::damon::Spec;

/// Where DAMON's sysfs interface lives, under the system's root.
pub const ADMIN: &str = "sys/kernel/mm/damon/admin";

/// Writes `value` to an existing kernel attribute file: never creates one,
/// never follows a symlink, and names the file in the error.
fn write_attr(path: &Path, value: &str) -> Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let mut f = fs::OpenOptions::new()
        .write(true)
        // As a shell's `echo v > attr`: sysfs ignores it, a file is rewritten.
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("opening {} to write", path.display()))?;
    f.write_all(value.as_bytes())
        .with_context(|| format!("writing {value:?} to {}", path.display()))
}

fn read_attr(path: &Path) -> Result<String> {
    Ok(fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_owned())
}

/// numatrace's running kdamond; dropping it stops it.
#[derive(Debug)]
pub struct Kdamond {
    /// `kdamonds/0` under the admin directory.
    dir: PathBuf,
    admin: PathBuf,
    proc_root: PathBuf,
    pid: u32,
    spec: Spec,
    cpu_at_start_ns: u64,
    stopped: bool,
    /// A stop signal before numatrace handles them itself (while the
    /// probes attach) stops the kdamond in the signal handler.
    _on_signal: Option<crate::fs::KdamondSlot>,
}

impl Kdamond {
    /// Starts a kdamond with paddr operations over `spec` on the running
    /// system.
    pub fn start(spec: &Spec) -> Result<Kdamond> {
        Kdamond::start_at(Path::new("/"), spec)
    }

    /// As [`start`](Self::start), on the system whose files are under `root`.
    pub fn start_at(root: &Path, spec: &Spec) -> Result<Kdamond> {
        let admin = root.join(ADMIN);
        let count = admin.join("kdamonds/nr_kdamonds");
        if !count.exists() {
            bail!(
                "this kernel has no DAMON sysfs interface ({} is missing: CONFIG_DAMON_SYSFS \
                 off; Debian's 6.1 kernel has no DAMON): --truth damon needs DAMON with \
                 physical-address operations",
                count.display()
            );
        }
        let existing = read_attr(&count)?;
        if existing != "0" {
            bail!(
                "DAMON's sysfs already has {existing} kdamond(s), set up by another tool \
                 (damo, memtierd, an administrator): numatrace never reconfigures a kdamond \
                 it did not start. Stop them first (echo off > {dir}/kdamonds/N/state; \
                 echo 0 > {dir}/kdamonds/nr_kdamonds) or run without --truth damon",
                dir = admin.display()
            );
        }
        if spec.regions.is_empty() {
            bail!("no memory node spans to monitor (/proc/zoneinfo names none)");
        }
        let dir = admin.join("kdamonds/0");
        let on_signal = crate::fs::KdamondSlot::enter(&dir.join("state"), &count);
        write_attr(&count, "1")?;
        let mut k = Kdamond {
            _on_signal: on_signal,
            dir,
            admin,
            proc_root: root.join("proc"),
            pid: 0,
            spec: spec.clone(),
            cpu_at_start_ns: 0,
            stopped: false,
        };
        // From here on, dropping `k` on an error empties the list again.
        k.configure()?;
        write_attr(&k.dir.join("state"), "on").map_err(|e| explain_busy(root, e))?;
        let pid = read_attr(&k.dir.join("pid"))?;
        k.pid = pid
            .parse()
            .ok()
            .filter(|&p| p > 0)
            .with_context(|| format!("kdamond did not start: its pid reads {pid:?}"))?;
        k.cpu_at_start_ns = k.cpu_ns().unwrap_or(0);
        Ok(k)
    }

    fn configure(&self) -> Result<()> {
        let ctx = self.dir.join("contexts");
        write_attr(&ctx.join("nr_contexts"), "1")?;
        let ctx = ctx.join("0");
        let ops = read_attr(&ctx.join("avail_operations")).unwrap_or_default();
        if !ops.split_whitespace().any(|o| o == "paddr") {
            bail!(
                "this kernel's DAMON has no physical-address operations (available: {ops:?}; \
                 CONFIG_DAMON_PADDR off): --truth damon needs them"
            );
        }
        write_attr(&ctx.join("operations"), "paddr")?;
        let attrs = ctx.join("monitoring_attrs");
        let s = &self.spec;
        for (name, v) in [
            ("intervals/sample_us", s.sample_us),
            ("intervals/aggr_us", s.aggr_us),
            ("intervals/update_us", s.update_us),
            ("nr_regions/min", u64::from(s.min_regions)),
            ("nr_regions/max", u64::from(s.max_regions)),
        ] {
            write_attr(&attrs.join(name), &v.to_string())?;
        }
        let targets = ctx.join("targets");
        write_attr(&targets.join("nr_targets"), "1")?;
        let regions = targets.join("0/regions");
        write_attr(&regions.join("nr_regions"), &s.regions.len().to_string())?;
        for (i, (start, end)) in s.regions.iter().enumerate() {
            let r = regions.join(i.to_string());
            write_attr(&r.join("start"), &start.to_string())?;
            write_attr(&r.join("end"), &end.to_string())?;
        }
        Ok(())
    }

    /// The kdamond thread's id: its `damon_aggregated` records are ours.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The kdamond's CPU time so far (user and system, `/proc/PID/stat`).
    pub fn cpu_ns(&self) -> Result<u64> {
        let path = self.proc_root.join(format!("{}/stat", self.pid));
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        cpu_ns_of_stat(&text, clock_ticks_per_s())
            .with_context(|| format!("{} does not parse", path.display()))
    }

    /// CPU time the kdamond took since it started.
    pub fn cpu_since_start_ns(&self) -> Result<u64> {
        Ok(self.cpu_ns()?.saturating_sub(self.cpu_at_start_ns))
    }

    /// Stops the kdamond and empties DAMON's list, when entry 0 is still
    /// the one this started.
    pub fn stop(mut self) -> Result<()> {
        self.stop_once()
    }

    fn stop_once(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.stopped, true) {
            return Ok(());
        }
        let state = self.dir.join("state");
        if self.pid != 0 {
            let now = read_attr(&self.dir.join("pid")).unwrap_or_default();
            if now != self.pid.to_string() {
                bail!(
                    "DAMON's kdamond 0 is no longer numatrace's (pid {now}, numatrace started \
                     {}): left as it is",
                    self.pid
                );
            }
            write_attr(&state, "off")?;
        }
        write_attr(&self.admin.join("kdamonds/nr_kdamonds"), "0")
    }
}

impl Drop for Kdamond {
    fn drop(&mut self) {
        if let Err(e) = self.stop_once() {
            log::warn!("stopping numatrace's kdamond: {e:#}");
        }
    }
}

/// DAMON lets no kdamond start beside an exclusive user (EBUSY): on 7.x
/// the DAMON_STAT module, which runs by default. numatrace does not stop
/// it (it did not start it); the error says how to.
fn explain_busy(root: &Path, e: anyhow::Error) -> anyhow::Error {
    let busy = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            == Some(libc::EBUSY)
    });
    if !busy {
        return e;
    }
    let stat = root.join("sys/module/damon_stat/parameters/enabled");
    let by = match read_attr(&stat).as_deref() {
        Ok("Y") => format!("DAMON_STAT runs ({} is Y)", stat.display()),
        _ => "another DAMON user runs exclusively".to_owned(),
    };
    e.context(format!(
        "DAMON is busy: {by}, and DAMON starts no other kdamond beside an exclusive one. \
         numatrace does not stop it: stop it for the run (echo N > {}; echo Y after) or run \
         without --truth damon",
        stat.display()
    ))
}

fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// utime + stime of a `/proc/PID/stat` line, in nanoseconds. The command
/// name (field 2) may hold spaces and parentheses: fields are counted after
/// its last `)`.
pub fn cpu_ns_of_stat(text: &str, ticks_per_s: u64) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state is field 3; utime and stime are 14 and 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime).saturating_mul(1_000_000_000) / ticks_per_s.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A directory removed when the test ends.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> Scratch {
            static N: AtomicU32 = AtomicU32::new(0);
            let d = std::env::temp_dir().join(format!(
                "numatrace-damon-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(&d).expect("temp dir");
            Scratch(d)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// A fake DAMON sysfs tree with one kdamond entry already laid out (the
    /// kernel makes it when nr_kdamonds is written; here it exists before).
    fn fake(nr_kdamonds: &str, regions: usize) -> Scratch {
        let root = Scratch::new();
        let a = root.path().join(ADMIN);
        let k = a.join("kdamonds/0");
        let c = k.join("contexts/0");
        let mut files = vec![
            (a.join("kdamonds/nr_kdamonds"), nr_kdamonds.to_owned()),
            (k.join("state"), "off".into()),
            (k.join("pid"), "-1".into()),
            (k.join("contexts/nr_contexts"), "0".into()),
            (c.join("avail_operations"), "vaddr\nfvaddr\npaddr".into()),
            (c.join("operations"), "vaddr".into()),
            (c.join("targets/nr_targets"), "0".into()),
            (c.join("targets/0/regions/nr_regions"), "0".into()),
        ];
        for n in [
            "intervals/sample_us",
            "intervals/aggr_us",
            "intervals/update_us",
            "nr_regions/min",
            "nr_regions/max",
        ] {
            files.push((c.join("monitoring_attrs").join(n), "0".into()));
        }
        for i in 0..regions {
            let r = c.join(format!("targets/0/regions/{i}"));
            files.push((r.join("start"), "0".into()));
            files.push((r.join("end"), "0".into()));
        }
        for (path, text) in files {
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(&path, text).expect("write");
        }
        // The kernel fills the pid when the state goes on; here, at once.
        fs::write(k.join("pid"), "4242").expect("pid");
        let stat = root.path().join("proc/4242");
        fs::create_dir_all(&stat).expect("mkdir");
        fs::write(
            stat.join("stat"),
            "4242 (kdamond.0) S 2 0 0 0 -1 2129984 0 0 0 0 30 70 0 0 20 0 1 0",
        )
        .expect("stat");
        root
    }

    fn attr(root: &Path, rel: &str) -> String {
        read_attr(&root.join(ADMIN).join(rel)).expect("attr")
    }

    #[test]
    fn starts_over_the_spans_and_stops_what_it_started() {
        let root = fake("0", 2);
        let spec = Spec::over(vec![(0, 1 << 30), (2 << 30, 3 << 30)]);
        let k = Kdamond::start_at(root.path(), &spec).expect("start");
        let p = root.path();
        assert_eq!(k.pid(), 4242);
        assert_eq!(attr(p, "kdamonds/nr_kdamonds"), "1");
        assert_eq!(attr(p, "kdamonds/0/state"), "on");
        assert_eq!(attr(p, "kdamonds/0/contexts/0/operations"), "paddr");
        let c = "kdamonds/0/contexts/0/";
        assert_eq!(
            attr(p, &format!("{c}monitoring_attrs/intervals/aggr_us")),
            "100000"
        );
        assert_eq!(attr(p, &format!("{c}targets/0/regions/nr_regions")), "2");
        assert_eq!(
            attr(p, &format!("{c}targets/0/regions/1/start")),
            "2147483648"
        );
        assert_eq!(
            attr(p, &format!("{c}targets/0/regions/1/end")),
            "3221225472"
        );
        assert_eq!(
            k.cpu_ns().expect("cpu"),
            1_000_000_000 * 100 / clock_ticks_per_s()
        );
        drop(k);
        assert_eq!(attr(p, "kdamonds/0/state"), "off");
        assert_eq!(attr(p, "kdamonds/nr_kdamonds"), "0");
    }

    #[test]
    fn a_kdamond_it_did_not_start_is_left_alone() {
        let root = fake("1", 1);
        let e = Kdamond::start_at(root.path(), &Spec::over(vec![(0, 4096)]))
            .expect_err("someone else's kdamond");
        assert!(format!("{e:#}").contains("never reconfigures"), "{e:#}");
        assert_eq!(attr(root.path(), "kdamonds/nr_kdamonds"), "1");
        assert_eq!(attr(root.path(), "kdamonds/0/state"), "off");

        // Taken over while running: stopping leaves the other one alone.
        let root = fake("0", 1);
        let k = Kdamond::start_at(root.path(), &Spec::over(vec![(0, 4096)])).expect("start");
        fs::write(root.path().join(ADMIN).join("kdamonds/0/pid"), "999").expect("pid");
        let e = k.stop().expect_err("not ours any more");
        assert!(format!("{e:#}").contains("no longer numatrace's"), "{e:#}");
        assert_eq!(attr(root.path(), "kdamonds/0/state"), "on");
    }

    #[test]
    fn a_failed_setup_empties_the_list_again() {
        let root = fake("0", 1);
        // Two regions asked, the fake has one region's files: the write fails.
        let spec = Spec::over(vec![(0, 4096), (8192, 12288)]);
        Kdamond::start_at(root.path(), &spec).expect_err("no second region");
        assert_eq!(attr(root.path(), "kdamonds/nr_kdamonds"), "0");
        let none = Scratch::new();
        let e = Kdamond::start_at(none.path(), &spec).expect_err("no DAMON");
        assert!(format!("{e:#}").contains("no DAMON sysfs"), "{e:#}");
    }

    #[test]
    fn busy_names_damon_stat_and_how_to_stop_it() {
        let root = Scratch::new();
        let stat = root.path().join("sys/module/damon_stat/parameters");
        fs::create_dir_all(&stat).expect("mkdir");
        fs::write(stat.join("enabled"), "Y\n").expect("enabled");
        let ebusy = anyhow::Error::new(std::io::Error::from_raw_os_error(libc::EBUSY))
            .context("writing \"on\"");
        let e = format!("{:#}", explain_busy(root.path(), ebusy));
        assert!(
            e.contains("DAMON_STAT runs") && e.contains("echo N >"),
            "{e}"
        );
        let other = anyhow::Error::new(std::io::Error::from_raw_os_error(libc::EINVAL));
        let e = format!("{:#}", explain_busy(root.path(), other));
        assert!(!e.contains("busy"), "{e}");
    }

    #[test]
    fn cpu_time_is_read_past_a_command_name_with_spaces() {
        let line = "7 (a) b (c)) R 1 1 1 0 -1 0 0 0 0 0 250 50 0 0";
        assert_eq!(cpu_ns_of_stat(line, 100), Some(3_000_000_000));
        assert_eq!(cpu_ns_of_stat("7 (x) R 1", 100), None);
    }
}
