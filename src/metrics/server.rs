//! The HTTP side: hyper's HTTP/1 server on a current-thread tokio runtime. `/metrics` collects
//! on tokio's blocking pool (collection enters netns per thread, so it never runs on the
//! runtime's own thread), one scrape at a time; `/healthz` answers without touching the kernel.

use super::Exporter;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Connections served at once; more are closed at accept (bounded memory and fds).
const MAX_CONNECTIONS: usize = 64;
/// A client has this long to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

fn reply(status: StatusCode, ctype: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(ctype) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

async fn handle(
    req: Request<Incoming>,
    exporter: Arc<Exporter>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "GET only\n"));
    }
    Ok(match req.uri().path() {
        "/metrics" => match tokio::task::spawn_blocking(move || exporter.scrape()).await {
            Ok(body) => reply(StatusCode::OK, super::encode::CONTENT_TYPE, body),
            // Only a bug in the encoder itself gets here: one pod's trouble never does.
            Err(e) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                TEXT,
                format!("scrape failed: {e}\n"),
            ),
        },
        "/healthz" => reply(StatusCode::OK, TEXT, "ok\n"),
        "/" => reply(
            StatusCode::OK,
            TEXT,
            "rdma-host-device metrics exporter: /metrics, /healthz\n",
        ),
        _ => reply(StatusCode::NOT_FOUND, TEXT, "not found: try /metrics\n"),
    })
}

/// Serve until the process is killed. Errors only when the address cannot be bound.
pub fn serve(listen: SocketAddr, exporter: Arc<Exporter>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(4)
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        log::info!(
            "serving /metrics on {} (state dir {})",
            listener.local_addr()?,
            exporter.source.state_dir.display()
        );
        let active = Arc::new(AtomicUsize::new(0));
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    // EMFILE and friends: back off rather than spin.
                    log::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if active.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                drop(stream);
                continue;
            }
            active.fetch_add(1, Ordering::SeqCst);
            let (exporter, active) = (exporter.clone(), active.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req| handle(req, exporter.clone()));
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), svc);
                if let Err(e) = conn.await {
                    log::debug!("connection: {e}");
                }
                active.fetch_sub(1, Ordering::SeqCst);
            });
        }
    })
}
