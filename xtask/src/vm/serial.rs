//! Watching a QEMU run by its serial console: streamed to the user, parsed,
//! stopped at the timeout, and the results block unpacked.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::console::{base64_decode, Console};
use super::{Guest, Outcome};

enum Event {
    Console(Vec<u8>),
    ConsoleClosed,
    QemuError(String),
}

/// What streaming the console gathered.
struct Streamed {
    console: Console,
    qemu_errors: Vec<String>,
    ready_after: Option<Duration>,
    timed_out: bool,
}

/// Streams the console until the guest powers off, the timeout hits, or
/// QEMU dies; then extracts the results.
pub(super) fn watch(
    mut child: Child,
    guest: &Guest,
    start: Instant,
    console_log: PathBuf,
    lock: fs::File,
) -> Result<Outcome> {
    let rx = spawn_readers(&mut child)?;
    let Streamed {
        console,
        qemu_errors,
        ready_after,
        timed_out,
    } = stream(&rx, start, guest.timeout, guest.show_console);
    // A guest that powered off has QEMU exiting by itself: let it finish
    // (a plugin writes its files at exit) before killing what is left.
    let grace = Instant::now() + Duration::from_secs(10);
    while !timed_out && Instant::now() < grace && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Killing an already exited QEMU fails harmlessly.
    let _ = child.kill();
    let _ = child.wait();
    let elapsed = start.elapsed();

    fs::write(&console_log, &console.log)
        .with_context(|| format!("cannot write {}", console_log.display()))?;
    let results_error = if console.exit_status.is_some() {
        extract_results(&console, guest.out)
            .err()
            .map(|e| format!("{e:#}"))
    } else {
        None
    };
    Ok(Outcome {
        exit_status: console.exit_status,
        timed_out,
        timeout: guest.timeout,
        setup_failed: console.setup_failed.clone(),
        kernel_problems: console.problems.clone(),
        results_error,
        qemu_errors,
        console: console.log,
        console_log,
        ready_after,
        elapsed,
        _lock: lock,
    })
}

/// Threads that forward QEMU's stdout (the console, as it comes) and its
/// stderr (by line) as events.
fn spawn_readers(child: &mut Child) -> Result<mpsc::Receiver<Event>> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().context("QEMU stdout not captured")?;
    let stderr = child.stderr.take().context("QEMU stderr not captured")?;
    let console_tx = tx.clone();
    std::thread::spawn(move || {
        let mut stdout = stdout;
        let mut buf = [0u8; 8192];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if console_tx.send(Event::Console(buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = console_tx.send(Event::ConsoleClosed);
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(Event::QemuError(line)).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

/// Parses the console (and shows it, if `show`) until it closes or
/// `timeout` (from `start`) passes; after the exit marker, waits at most
/// 10 s more.
fn stream(rx: &mpsc::Receiver<Event>, start: Instant, timeout: Duration, show: bool) -> Streamed {
    let mut console = Console::default();
    let mut qemu_errors = Vec::new();
    let mut ready_after = None;
    let mut timed_out = false;
    let mut deadline = start + timeout;
    let mut out = std::io::stdout();
    loop {
        let now = Instant::now();
        if now >= deadline {
            // After the exit marker this is only the grace period for poweroff.
            timed_out = console.exit_status.is_none();
            break;
        }
        match rx.recv_timeout(deadline - now) {
            Ok(Event::Console(bytes)) => {
                let shown = console.feed(&bytes);
                if show {
                    // The user's terminal going away must not stop the run.
                    let _ = out.write_all(&shown).and_then(|()| out.flush());
                }
                if console.ready && ready_after.is_none() {
                    ready_after = Some(start.elapsed());
                }
                if console.exit_status.is_some() {
                    deadline = deadline.min(Instant::now() + Duration::from_secs(10));
                }
            }
            Ok(Event::QemuError(line)) => {
                eprintln!("qemu: {line}");
                qemu_errors.push(line);
            }
            Ok(Event::ConsoleClosed) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    console.finish();
    Streamed {
        console,
        qemu_errors,
        ready_after,
        timed_out,
    }
}

fn extract_results(console: &Console, out: &Path) -> Result<()> {
    if !console.results_complete {
        bail!("the guest sent no complete results block");
    }
    let tarball = base64_decode(&console.results_b64)?;
    let mut tar = Command::new("tar")
        .arg("-xzf")
        .arg("-")
        .arg("-C")
        .arg(out)
        .stdin(Stdio::piped())
        .spawn()
        .context("cannot start tar")?;
    tar.stdin
        .take()
        .context("tar stdin not captured")?
        .write_all(&tarball)
        .context("cannot feed tar")?;
    let status = tar.wait()?;
    if !status.success() {
        bail!(
            "tar could not unpack the results into {} ({status})",
            out.display()
        );
    }
    Ok(())
}
