//! Helpers of the exporter's host tests: a replay-fed `numatrace export`
//! child, a minimal HTTP/1.1 client, free loopback ports.
#![allow(dead_code, reason = "each test binary uses a subset")]

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

pub(crate) const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/testdata/hot-chunks-6.12.trace"
);
pub(crate) const NUMATRACE: &str = env!("CARGO_BIN_EXE_numatrace");

/// A scratch directory removed on drop.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let p =
            std::env::temp_dir().join(format!("numatrace-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).expect("creating a temporary directory");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port nobody listens on right now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding an ephemeral loopback port")
}

/// A child process killed (SIGTERM, then SIGKILL) on drop.
pub(crate) struct Proc {
    pub child: Child,
    pub name: &'static str,
}

impl Proc {
    pub(crate) fn spawn(name: &'static str, cmd: &mut Command) -> Proc {
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({cmd:?}): {e}"));
        Proc { child, name }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits up to `timeout` for the exit status.
    pub(crate) fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub(crate) fn assert_running(&mut self) {
        if let Ok(Some(s)) = self.child.try_wait() {
            panic!("{} exited early: {s}", self.name);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.terminate(Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `numatrace export --replay TRACE` on a free port, stderr to `log`.
pub(crate) fn spawn_exporter(speed: f64, extra: &[&str], log: &Path) -> (Proc, SocketAddr) {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let stderr = std::fs::File::create(log).expect("creating the exporter's log");
    let mut cmd = Command::new(NUMATRACE);
    cmd.args(["export", "--replay", TRACE, "--speed", &speed.to_string()])
        .args(["--listen", &addr.to_string()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(stderr);
    let mut p = Proc::spawn("numatrace export", &mut cmd);
    wait_until(
        Duration::from_secs(20),
        "the exporter to serve /metrics",
        || {
            p.assert_running();
            get(addr, "/metrics", None).is_ok_and(|r| r.status == 200)
        },
    );
    (p, addr)
}

pub(crate) fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !f() {
        assert!(
            Instant::now() < end,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends one request on `stream` (keep-alive) and reads its response.
pub(crate) fn request(
    stream: &mut BufReader<TcpStream>,
    path: &str,
    accept: Option<&str>,
) -> std::io::Result<Response> {
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        stream.get_mut(),
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{accept}\r\n"
    )?;
    let mut status_line = String::new();
    if stream.read_line(&mut status_line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            stream.read_line(&mut size)?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| std::io::Error::other(format!("bad chunk size {size:?}")))?;
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| std::io::Error::other("neither content-length nor chunked"))?;
        body.resize(len, 0);
        stream.read_exact(&mut body)?;
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

pub(crate) fn connect(addr: SocketAddr) -> std::io::Result<BufReader<TcpStream>> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    Ok(BufReader::new(s))
}

/// One request on a fresh connection.
pub(crate) fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> std::io::Result<Response> {
    request(&mut connect(addr)?, path, accept)
}

/// `numatrace stats TRACE --json`: the reference numbers.
pub(crate) fn stats_json() -> serde_json::Value {
    let out = Command::new(NUMATRACE)
        .args(["stats", TRACE, "--json"])
        .output()
        .expect("running numatrace stats");
    assert!(
        out.status.success(),
        "numatrace stats failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stats --json is JSON")
}

/// Resident set size of `pid` in KiB.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or_else(|| panic!("no VmRSS for pid {pid}"))
}

/// The `replay finished: X s of trace in Y s` line: (X, Y).
pub(crate) fn replay_times(log: &Path) -> Option<(f64, f64)> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().find(|l| l.contains("replay finished:"))?;
    let nums: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    Some((*nums.first()?, *nums.get(1)?))
}

/// A tool of Debian's prometheus package, or a panic naming the remedy.
pub(crate) fn tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` is not installed: this test needs Debian's prometheus package \
                 (`cargo xtask setup` installs it, or `apt-get install prometheus`)"
            )
        })
}

/// Percent-encoding for a Prometheus query string.
pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Starts `prometheus` scraping `exporter` every second, with its config,
/// data and log in `dir`; returns once it is ready.
pub(crate) fn start_prometheus(
    prometheus: &Path,
    dir: &Path,
    exporter: SocketAddr,
) -> (Proc, SocketAddr) {
    let prom_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: numatrace\n    static_configs:\n      - targets: ['{exporter}']\n"
        ),
    )
    .expect("writing prometheus.yml");
    let prom_log = dir.join("prometheus.log");
    let mut prom = Proc::spawn(
        "prometheus",
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&prom_log).expect("log")),
    );
    wait_until(Duration::from_secs(30), "Prometheus to be ready", || {
        if let Ok(Some(s)) = prom.child.try_wait() {
            panic!(
                "prometheus exited ({s}): {}",
                std::fs::read_to_string(&prom_log).unwrap_or_default()
            );
        }
        get(prom_addr, "/-/ready", None).is_ok_and(|r| r.status == 200)
    });
    (prom, prom_addr)
}
