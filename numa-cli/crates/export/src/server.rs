//! The HTTP side of `numatrace export`: `/metrics` (content negotiation
//! between OpenMetrics and the classic text format), `/` (a page linking to
//! it that states the attach plan). Runs on its own thread and runtime and
//! only reads the latest published state, so scrapes never block the event
//! pipeline.
//!
//! Bounded per connection: at most [`MAX_CONNECTIONS`] at once (at the
//! limit, a new connection closes the one that has gone longest without a
//! request, so connections held idle cannot keep a scrape waiting) and
//! [`MAX_CONNECTIONS_PER_PEER`] of one peer (more are closed at once), a
//! [`MAX_REQUEST_BUF`] request buffer, headers within
//! [`HEADER_READ_TIMEOUT`] (this also closes idle keep-alive connections),
//! and a response write that makes no progress for [`WRITE_STALL_TIMEOUT`]
//! drops the connection (a client that stops reading). Bodies are shared
//! `Bytes` of one encoding per published state and format, never copied per
//! connection.
use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    future::Future,
    io,
    net::{IpAddr, Ipv6Addr},
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
    time::Duration,
};

use http_body_util::Full;
use hyper::{
    body::{Bytes, Incoming},
    header, Method, Request, Response, StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{watch, Notify, Semaphore, TryAcquireError},
    time::Sleep,
};

use super::metrics::{self, Format, MetricsState};
use numa_host::promoter_state::{Reading, Source};

pub const MAX_CONNECTIONS: usize = 512;
/// Connections one peer may hold at once, so that one client cannot take
/// every slot: a Prometheus server scrapes over one connection. Loopback
/// peers are exempt: on one host every client has the same address.
pub const MAX_CONNECTIONS_PER_PEER: usize = 16;
/// hyper's minimum is 8 KiB; a scrape request is a few hundred bytes.
pub const MAX_REQUEST_BUF: usize = 16 << 10;
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Cache {
    generation: u64,
    /// The promoter's state the encodings include.
    promoter: Option<Reading>,
    openmetrics: Option<Bytes>,
    prometheus: Option<Bytes>,
}

/// What every connection shares: the published state and the encodings of
/// its latest generation.
pub struct Shared {
    rx: watch::Receiver<Arc<MetricsState>>,
    cache: Mutex<Cache>,
    index_html: Bytes,
    /// Where a running promoter publishes its state (read per scrape).
    promoter: Option<Source>,
}

impl Shared {
    pub fn new(rx: watch::Receiver<Arc<MetricsState>>, index_html: String) -> Arc<Shared> {
        Shared::with_promoter(rx, index_html, None)
    }

    /// Scrapes also show the promoter publishing at `promoter`.
    pub fn with_promoter(
        rx: watch::Receiver<Arc<MetricsState>>,
        index_html: String,
        promoter: Option<Source>,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            rx,
            cache: Mutex::new(Cache {
                generation: u64::MAX,
                ..Cache::default()
            }),
            index_html: Bytes::from(index_html),
            promoter,
        })
    }

    /// The body for `format`, encoded at most once per published state.
    pub fn body(&self, format: Format) -> Result<Bytes, std::fmt::Error> {
        // Clone the Arc and release the channel's lock at once.
        let state = self.rx.borrow().clone();
        let promoter = self.promoter.as_ref().map(Source::read);
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.generation != state.generation || cache.promoter != promoter {
            *cache = Cache {
                generation: state.generation,
                promoter: promoter.clone(),
                ..Cache::default()
            };
        }
        if cache.openmetrics.is_none() {
            cache.openmetrics = Some(Bytes::from(metrics::encode_openmetrics_with(
                state, promoter,
            )?));
        }
        let om = cache.openmetrics.clone().unwrap_or_default();
        Ok(match format {
            Format::OpenMetrics => om,
            Format::Prometheus => cache
                .prometheus
                .get_or_insert_with(|| {
                    Bytes::from(metrics::to_prometheus_text(&String::from_utf8_lossy(&om)))
                })
                .clone(),
        })
    }
}

fn respond(status: StatusCode, content_type: &str, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

fn handle(req: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"only GET and HEAD\n"),
        );
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match req.uri().path() {
        "/metrics" => {
            let accept = req
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok());
            let format = Format::negotiate(accept);
            match shared.body(format) {
                Ok(body) => respond(StatusCode::OK, format.content_type(), body),
                Err(_) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    Bytes::from_static(b"encoding the metrics failed\n"),
                ),
            }
        }
        "/" => respond(
            StatusCode::OK,
            "text/html; charset=utf-8",
            shared.index_html.clone(),
        ),
        _ => respond(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            Bytes::from_static(b"not found: try /metrics\n"),
        ),
    }
}

/// A TCP stream whose writes fail once they have made no progress for
/// `limit`: hyper has no write timeout, and a client that stops reading
/// would otherwise hold its connection (and response) forever.
struct StallGuard {
    inner: TcpStream,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl StallGuard {
    fn track<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => {
                let limit = self.limit;
                let sleep = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if sleep.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "client stopped reading",
                    )));
                }
                Poll::Pending
            }
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl AsyncRead for StallGuard {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for StallGuard {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.track(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.track(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.track(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.track(cx, r)
    }
}

/// How many connections the server holds at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// In all.
    pub connections: usize,
    /// From one peer address (an IPv6 peer: its /64).
    pub per_peer: usize,
    /// Whether loopback peers are held to `per_peer` too.
    pub per_peer_on_loopback: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: MAX_CONNECTIONS,
            per_peer: MAX_CONNECTIONS_PER_PEER,
            per_peer_on_loopback: false,
        }
    }
}

/// Serves until `shutdown` turns true (or its sender is dropped).
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, shutdown: watch::Receiver<bool>) {
    serve_with(listener, shared, shutdown, Limits::default()).await;
}

/// [`serve`] within `limits`.
pub async fn serve_with(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
) {
    let permits = Arc::new(Semaphore::new(limits.connections));
    let peers = Arc::new(PeerSlots::default());
    let conns = Arc::new(Conns::default());
    let mut accept_error_reported = false;
    let mut peer_cap_reported = false;
    loop {
        let stream = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let (stream, peer) = match stream {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and friends: report once, back off, keep serving.
                if !accept_error_reported {
                    log::warn!("accepting a scrape connection failed: {e} (check `ulimit -n`)");
                    accept_error_reported = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(peer_slot) = peers.admit(peer.ip(), &limits) else {
            // Closed at once: the slot goes back.
            if !peer_cap_reported {
                log::warn!(
                    "{} holds {} scrape connections, the most one peer may; \
                     its further connections are closed",
                    peer.ip(),
                    limits.per_peer
                );
                peer_cap_reported = true;
            }
            continue;
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(TryAcquireError::Closed) => return,
            Err(TryAcquireError::NoPermits) => {
                // Every slot is held: the longest idle gives its slot up.
                conns.close_oldest();
                tokio::select! {
                    p = permits.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => return,
                    },
                    _ = shutdown.wait_for(|stop| *stop) => return,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let held = conns.admit();
        tokio::spawn(async move {
            let _slots = (permit, peer_slot);
            let close = held.close.clone();
            tokio::select! {
                _ = serve_connection(stream, shared, held) => {}
                _ = close.notified() => {}
            }
        });
    }
}

/// The connections held, by when each last began a request (or was
/// accepted): the one that has gone longest without is closed for a new
/// one when every slot is taken. A scrape sends its request at once, so it
/// is never that one; a connection held open without requests is.
#[derive(Default)]
struct Conns {
    by_age: Mutex<(u64, BTreeMap<u64, Arc<Notify>>)>,
}

/// One connection's place in [`Conns`]; removed on drop.
struct Held {
    conns: Arc<Conns>,
    /// Its key in `by_age`: the count of accepts and requests when it last
    /// had one.
    key: AtomicU64,
    close: Arc<Notify>,
}

impl Conns {
    fn admit(self: &Arc<Self>) -> Arc<Held> {
        let close = Arc::new(Notify::new());
        let mut g = self.by_age.lock().unwrap_or_else(|e| e.into_inner());
        let key = g.0;
        g.0 += 1;
        g.1.insert(key, close.clone());
        Arc::new(Held {
            conns: self.clone(),
            key: AtomicU64::new(key),
            close,
        })
    }

    /// Tells the connection that has gone longest without a request to
    /// close (it gives its slot back as it ends).
    fn close_oldest(&self) {
        let mut g = self.by_age.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, close)) = g.1.pop_first() {
            close.notify_one();
        }
    }
}

impl Held {
    /// A request began: the connection is the most recently active.
    fn active(&self) {
        let mut g = self.conns.by_age.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.key.load(Ordering::Relaxed);
        // Already told to close: it stays out of the order.
        if g.1.remove(&old).is_none() {
            return;
        }
        let key = g.0;
        g.0 += 1;
        g.1.insert(key, self.close.clone());
        self.key.store(key, Ordering::Relaxed);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut g = self.conns.by_age.lock().unwrap_or_else(|e| e.into_inner());
        g.1.remove(&self.key.load(Ordering::Relaxed));
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>, held: Arc<Held>) {
    let io = TokioIo::new(StallGuard {
        inner: stream,
        limit: WRITE_STALL_TIMEOUT,
        stalled: None,
    });
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        held.active();
        let resp = handle(&req, &shared);
        async move { Ok::<_, Infallible>(resp) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_REQUEST_BUF)
        .serve_connection(io, service)
        .await;
}

/// Connections held per peer ([`peer_key`]).
#[derive(Default)]
struct PeerSlots {
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// A connection's place in its peer's count; given back on drop.
struct PeerSlot {
    slots: Arc<PeerSlots>,
    peer: IpAddr,
}

impl PeerSlots {
    /// A slot for a connection from `ip`, `Err` when its peer holds
    /// `limits.per_peer` already; `Ok(None)` for a loopback peer that is
    /// not counted.
    fn admit(self: &Arc<Self>, ip: IpAddr, limits: &Limits) -> Result<Option<PeerSlot>, ()> {
        let peer = peer_key(ip);
        if !limits.per_peer_on_loopback && (ip.is_loopback() || peer.is_loopback()) {
            return Ok(None);
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(peer).or_insert(0);
        if *n >= limits.per_peer {
            return Err(());
        }
        *n += 1;
        Ok(Some(PeerSlot {
            slots: self.clone(),
            peer,
        }))
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                // Only peers with connections stay in the map.
                held.remove(&self.peer);
            }
        }
    }
}

/// The address a peer's connections are counted under: an IPv4 address
/// (also when mapped into IPv6), or an IPv6 address's /64, which one host
/// usually holds whole.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(Ipv6Addr::from(segments))
            }
        },
        v4 => v4,
    }
}

/// Escapes text for HTML.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
