//! The HTTP side: hyper's HTTP/1 server on a current-thread tokio runtime. `/metrics` collects
//! on tokio's blocking pool (collection enters netns per thread, so it never runs on the
//! runtime's own thread), one scrape at a time; `/healthz` answers without touching the kernel.
//!
//! The port is reachable from every pod on the node, so slow or idle clients must not starve
//! Prometheus or the kubelet's `/healthz` probe:
//! - at most [`MAX_CONNECTIONS`] connections (bounded fds and memory). When all are taken, a
//!   new connection takes the slot of one that is not being answered: the least recently
//!   active of the peer address holding the most slots, so an idle flood evicts itself first.
//!   Only when every connection is being answered is the new one closed;
//! - a client has [`HEADER_TIMEOUT`] to send its request headers (hyper), and a connection
//!   that makes no progress for [`STALL_TIMEOUT`] while not being answered (idle between
//!   requests, or a client that stopped reading its reply) is closed;
//! - `/metrics` requests that arrive while a scrape runs share its result (one scrape serves
//!   them all: a client pipelining requests costs the node nothing and delays no one); a peer
//!   address has at most [`SCRAPES_WAITING_PER_PEER`] requests waiting, more of its own get
//!   503 at once, so requests being answered stay few, a flood from one address never makes
//!   another address's scrape fail, and there is always a slot to take;
//! - every connection is a task on the one runtime thread, never a thread of its own; scrapes
//!   run on at most [`SCRAPE_THREADS`] blocking threads.

use super::Exporter;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// Connections held at once (each one fd and a few KiB).
pub const MAX_CONNECTIONS: usize = 128;
/// A client has this long to send its request headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection not being answered that makes no progress this long is closed.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// `/metrics` requests of one peer address waiting for the scrape; more of its own get 503.
pub const SCRAPES_WAITING_PER_PEER: usize = 4;
/// Blocking threads for scrapes.
const SCRAPE_THREADS: usize = 4;

fn reply(status: StatusCode, ctype: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(ctype) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

/// One scrape's outcome, shared by every request that waited for it.
type Scrape = Shared<BoxFuture<'static, Result<Bytes, String>>>;

/// The scrape in flight (requests arriving join it) and how many requests each peer address
/// has waiting.
#[derive(Default)]
struct Scrapes {
    current: Mutex<Option<Scrape>>,
    waiting: Mutex<HashMap<IpAddr, usize>>,
}

/// A peer's place among the waiting requests, given back on drop.
struct Waiting<'a> {
    scrapes: &'a Scrapes,
    peer: IpAddr,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut w = self
            .scrapes
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = w.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                w.remove(&self.peer);
            }
        }
    }
}

impl Scrapes {
    /// A place for `peer`'s request, unless it has [`SCRAPES_WAITING_PER_PEER`] waiting.
    fn wait(&self, peer: IpAddr) -> Option<Waiting<'_>> {
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let n = w.entry(peer).or_insert(0);
        if *n >= SCRAPES_WAITING_PER_PEER {
            return None;
        }
        *n += 1;
        Some(Waiting {
            scrapes: self,
            peer,
        })
    }

    /// The scrape in flight, or a new one: every request gets a scrape that started no
    /// earlier than its arrival minus one scrape's time.
    fn join(&self, exporter: &Arc<Exporter>) -> Scrape {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = cur.as_ref()
            && s.peek().is_none()
        {
            return s.clone();
        }
        let exporter = exporter.clone();
        let s = async move {
            tokio::task::spawn_blocking(move || Bytes::from(exporter.scrape()))
                .await
                .map_err(|e| e.to_string())
        }
        .boxed()
        .shared();
        *cur = Some(s.clone());
        s
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Who may read `/metrics` (its labels name every tenant's pods, containers and netns paths):
/// anyone that reaches the port, or only a client sending the bearer token in `token_file`.
/// The file is read at every request, so a rotated Kubernetes Secret takes effect at once.
/// `/healthz` and `/` stay open: they say nothing about pods.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub token_file: Option<PathBuf>,
}

/// The most of a token file read: a token is a line, not a document.
const MAX_TOKEN: u64 = 4096;

/// The bearer token in `file`: a regular file (`files::read_regular`: opened without
/// blocking, so a FIFO put there cannot stall the one thread that answers every request), at
/// most [`MAX_TOKEN`] bytes, trimmed, not empty. The error says what is wrong with it.
pub fn read_token(file: &Path) -> Result<String, String> {
    let body =
        rdma_host_device_core::files::read_regular(file, MAX_TOKEN).map_err(|e| e.to_string())?;
    let token = String::from_utf8(body).map_err(|_| "not UTF-8 text".to_owned())?;
    match token.trim() {
        "" => Err("empty; put the bearer token Prometheus sends in it".into()),
        t => Ok(t.to_owned()),
    }
}

impl Access {
    /// The reply `req` gets instead of `/metrics` (401, or 503 when the token file cannot be
    /// read: refused, never opened up); `None` when it may read it.
    fn refusal<B>(&self, req: &Request<B>) -> Option<Response<Full<Bytes>>> {
        let file = self.token_file.as_ref()?;
        let want = match read_token(file) {
            Ok(t) => t,
            Err(why) => {
                log::error!(
                    "token file {}: {why}; refusing /metrics until it holds a token",
                    file.display()
                );
                return Some(reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    "the exporter's token file cannot be read\n",
                ));
            }
        };
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if given.is_some_and(|g| same_bytes(g.as_bytes(), want.as_bytes())) {
            return None;
        }
        let mut r = reply(
            StatusCode::UNAUTHORIZED,
            TEXT,
            "/metrics needs the exporter's bearer token (Authorization: Bearer ...)\n",
        );
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        Some(r)
    }
}

/// Equal, in a time that does not depend on where they first differ.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

async fn handle(
    req: Request<Incoming>,
    exporter: Arc<Exporter>,
    scrapes: Arc<Scrapes>,
    access: &Access,
    peer: IpAddr,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "GET only\n"));
    }
    Ok(match req.uri().path() {
        "/metrics" => {
            if let Some(refused) = access.refusal(&req) {
                return Ok(refused);
            }
            let Some(_turn) = scrapes.wait(peer) else {
                return Ok(reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    format!(
                        "{SCRAPES_WAITING_PER_PEER} requests of {peer} are already waiting; try again\n"
                    ),
                ));
            };
            match scrapes.join(&exporter).await {
                Ok(body) => reply(StatusCode::OK, super::encode::CONTENT_TYPE, body),
                // Only a bug in the encoder itself gets here: one pod's trouble never does.
                Err(e) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    TEXT,
                    format!("scrape failed: {e}\n"),
                ),
            }
        }
        "/healthz" => reply(StatusCode::OK, TEXT, "ok\n"),
        "/" => reply(
            StatusCode::OK,
            TEXT,
            "rdma-host-device-agent metrics exporter: /metrics, /healthz\n",
        ),
        _ => reply(StatusCode::NOT_FOUND, TEXT, "not found: try /metrics\n"),
    })
}

/// One connection's slot: who it is, when it last made progress, whether a request of it is
/// being answered, and how to close it.
struct Slot {
    peer: IpAddr,
    /// Milliseconds since the table's start: the last read or write progress, or the start or
    /// end of answering a request.
    last: AtomicU64,
    /// Requests of this connection being answered now.
    busy: AtomicUsize,
    close: Notify,
}

/// The connections held, by id.
struct Slots {
    start: Instant,
    next: AtomicU64,
    held: Mutex<HashMap<u64, Arc<Slot>>>,
}

impl Slots {
    fn new() -> Self {
        Slots {
            start: Instant::now(),
            next: AtomicU64::new(0),
            held: Mutex::new(HashMap::new()),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self, slot: &Slot) {
        slot.last.store(self.now(), Ordering::Relaxed);
    }

    /// A slot for a new connection from `peer`, evicting one when all are taken; `None` when
    /// every connection held is being answered.
    fn slot_for(&self, peer: IpAddr) -> Option<(u64, Arc<Slot>)> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.len() >= MAX_CONNECTIONS {
            let mut per_peer: HashMap<IpAddr, usize> = HashMap::new();
            for s in held.values() {
                *per_peer.entry(s.peer).or_default() += 1;
            }
            let victim = held
                .iter()
                .filter(|(_, s)| s.busy.load(Ordering::Relaxed) == 0)
                .max_by_key(|(_, s)| {
                    (
                        per_peer.get(&s.peer).copied().unwrap_or(0),
                        u64::MAX - s.last.load(Ordering::Relaxed),
                    )
                })
                .map(|(id, _)| *id)?;
            if let Some(v) = held.remove(&victim) {
                log::debug!(
                    "{MAX_CONNECTIONS} connections held; closing one of {}",
                    v.peer
                );
                v.close.notify_one();
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            peer,
            last: AtomicU64::new(self.now()),
            busy: AtomicUsize::new(0),
            close: Notify::new(),
        });
        held.insert(id, slot.clone());
        Some((id, slot))
    }

    fn release(&self, id: u64) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// Resolves when `slot` has made no progress for [`STALL_TIMEOUT`] while not being
    /// answered.
    async fn stalled(&self, slot: &Slot) {
        let limit = u64::try_from(STALL_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let idle = self.now().saturating_sub(slot.last.load(Ordering::Relaxed));
            if slot.busy.load(Ordering::Relaxed) == 0 && idle >= limit {
                return;
            }
        }
    }
}

/// Marks a slot as being answered for as long as it lives.
struct Answering<'a>(&'a Slots, &'a Slot);

impl<'a> Answering<'a> {
    fn new(slots: &'a Slots, slot: &'a Slot) -> Self {
        slot.busy.fetch_add(1, Ordering::Relaxed);
        slots.touch(slot);
        Answering(slots, slot)
    }
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.1.busy.fetch_sub(1, Ordering::Relaxed);
        self.0.touch(self.1);
    }
}

/// A connection's socket that notes every read and write that made progress in its slot.
struct Tracked {
    io: tokio::net::TcpStream,
    slots: Arc<Slots>,
    slot: Arc<Slot>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            me.slots.touch(&me.slot);
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.io).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            me.slots.touch(&me.slot);
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            me.slots.touch(&me.slot);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Serve one connection until it ends, stalls, or its slot is taken by a newer one.
async fn connection(
    io: Tracked,
    id: u64,
    exporter: Arc<Exporter>,
    scrapes: Arc<Scrapes>,
    access: Arc<Access>,
) {
    let (slots, slot) = (io.slots.clone(), io.slot.clone());
    let svc = {
        let (slots, slot) = (slots.clone(), slot.clone());
        service_fn(move |req| {
            let (exporter, scrapes) = (exporter.clone(), scrapes.clone());
            let (slots, slot, access) = (slots.clone(), slot.clone(), access.clone());
            async move {
                let _answering = Answering::new(&slots, &slot);
                handle(req, exporter, scrapes, &access, slot.peer).await
            }
        })
    };
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), svc);
    let ended = std::pin::pin!(conn);
    let evicted = std::pin::pin!(slot.close.notified());
    let stalled = std::pin::pin!(slots.stalled(&slot));
    let closed = std::pin::pin!(futures::future::select(evicted, stalled));
    match futures::future::select(ended, closed).await {
        futures::future::Either::Left((Err(e), _)) => log::debug!("connection: {e}"),
        futures::future::Either::Left((Ok(()), _)) => {}
        futures::future::Either::Right(_) => {
            log::debug!("closing a connection of {} (evicted or stalled)", slot.peer)
        }
    }
    slots.release(id);
}

/// Serve until the process is killed. Errors only when the address cannot be bound.
pub fn serve(listen: SocketAddr, exporter: Arc<Exporter>, access: Access) -> std::io::Result<()> {
    let rt = crate::async_rt::builder()
        .max_blocking_threads(SCRAPE_THREADS)
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        log::info!(
            "serving /metrics on {} (state dir {})",
            listener.local_addr()?,
            exporter.source.state_dir.display()
        );
        let slots = Arc::new(Slots::new());
        let scrapes = Arc::new(Scrapes::default());
        let access = Arc::new(access);
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and friends: back off rather than spin.
                    log::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Some((id, slot)) = slots.slot_for(peer.ip()) else {
                log::debug!(
                    "all {MAX_CONNECTIONS} connections are being answered; closing a new one"
                );
                drop(stream);
                continue;
            };
            let io = Tracked {
                io: stream,
                slots: slots.clone(),
                slot,
            };
            tokio::spawn(connection(
                io,
                id,
                exporter.clone(),
                scrapes.clone(),
                access.clone(),
            ));
            // Let the new connection read what it was sent before the next accept: a client
            // whose request is already here is then being answered, not the idlest in a burst
            // of accepts that could evict it.
            tokio::task::yield_now().await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_evicts_the_idlest_of_the_busiest_peer_and_never_one_being_answered() {
        let slots = Slots::new();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let (_, prom) = slots.slot_for(b).unwrap();
        let mut flood = Vec::new();
        for _ in 1..MAX_CONNECTIONS {
            flood.push(slots.slot_for(a).unwrap());
        }
        // The flood's oldest goes; Prometheus' connection, older still, stays.
        prom.last.store(0, Ordering::Relaxed);
        for (i, (_, s)) in flood.iter().enumerate() {
            s.last.store(10 + i as u64, Ordering::Relaxed);
        }
        let (_, newer) = slots.slot_for(a).unwrap();
        let held = slots.held.lock().unwrap();
        assert_eq!(held.len(), MAX_CONNECTIONS);
        assert!(!held.contains_key(&flood[0].0), "the flood's idlest stays");
        assert!(held.values().any(|s| Arc::ptr_eq(s, &prom)));
        drop(held);
        drop(newer);
        // Every connection being answered: a new one is refused, none evicted.
        for s in slots.held.lock().unwrap().values() {
            s.busy.store(1, Ordering::Relaxed);
        }
        assert!(slots.slot_for(a).is_none());
        assert_eq!(slots.held.lock().unwrap().len(), MAX_CONNECTIONS);
    }

    #[test]
    fn a_connection_not_answered_that_makes_no_progress_is_stalled() {
        let rt = crate::async_rt::current_thread().unwrap();
        let mut slots = Slots::new();
        // A table a minute old, so "quiet for longer than the limit" can be said.
        slots.start = Instant::now()
            .checked_sub(Duration::from_secs(60))
            .unwrap_or(slots.start);
        let (_, slot) = slots.slot_for("10.0.0.1".parse().unwrap()).unwrap();
        let limit = u64::try_from(STALL_TIMEOUT.as_millis()).unwrap();
        // Long quiet, but being answered (a scrape running): not stalled.
        slot.busy.store(1, Ordering::Relaxed);
        slot.last.store(0, Ordering::Relaxed);
        let start = Instant::now();
        let waited = rt.block_on(async {
            let t = tokio::time::timeout(Duration::from_millis(1500), slots.stalled(&slot));
            t.await.is_err()
        });
        assert!(waited, "stalled while being answered");
        // Not answered and quiet for longer than the limit: stalled at the next tick.
        slot.busy.store(0, Ordering::Relaxed);
        slot.last
            .store(slots.now().saturating_sub(limit), Ordering::Relaxed);
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(3), slots.stalled(&slot))
                .await
                .expect("not stalled")
        });
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
