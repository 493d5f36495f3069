//! HTTPS to the API server: HTTP/1.1 (hyper) over TLS (rustls on `ring`), the server's
//! certificate checked against the CA file alone, the bearer token read from its file (again
//! every minute: a service account's token rotates). Idle connections are kept for the next
//! request; a watch takes one of its own.
//!
//! Bounded: a request and its whole answer within `REQUEST_TIMEOUT`; an answer's body at most
//! `MAX_BODY` bytes (a broken or hostile server cannot make the agent hold more); a watch's
//! body is read by the caller (`watch.rs`), with its own bounds.

use super::types::Status;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue, USER_AGENT};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, RootCertStore};

/// One request, from connecting to the last byte of its answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read (a list of every slice of a big cluster is far below).
pub const MAX_BODY: usize = 16 << 20;
/// A token read longer ago than this is read again.
const TOKEN_REREAD: Duration = Duration::from_secs(60);
/// Idle connections kept for the next request.
const MAX_IDLE: usize = 4;
/// The largest token file read.
const MAX_TOKEN: u64 = 64 << 10;

/// Why a request failed: the server's answer (an HTTP code and its Status), or why none came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Answer {
        code: u16,
        reason: String,
        message: String,
    },
    NoAnswer(String),
}

impl Failure {
    /// The failure an error answer (`code`, `body`) says: the Status object's reason and
    /// message, or, when the body is not one (a proxy's page, "404 page not found" for a path
    /// the server does not serve), the HTTP reason phrase and the body's start.
    pub fn from_answer(code: StatusCode, body: &[u8]) -> Failure {
        match serde_json::from_slice::<Status>(body) {
            Ok(s) if s.kind == "Status" => Failure::Answer {
                code: code.as_u16(),
                reason: s.reason,
                message: s.message,
            },
            _ => {
                let text = String::from_utf8_lossy(body);
                let text = text.trim();
                let mut message: String = text.chars().take(200).collect();
                if message.len() < text.len() {
                    message.push_str("...");
                }
                Failure::Answer {
                    code: code.as_u16(),
                    reason: code.canonical_reason().unwrap_or_default().to_owned(),
                    message,
                }
            }
        }
    }
}

/// Where the API server is and how we prove who we are.
pub struct Target {
    /// `HOST:PORT` as the Host header says it.
    pub authority: String,
    /// The host to connect to (an IPv6 address without brackets) and its port.
    pub host: String,
    pub port: u16,
    /// The server URL's path, without a trailing `/` (usually empty).
    pub base_path: String,
    pub ca: PathBuf,
    pub token: PathBuf,
}

/// A client of one API server; shared by every clone of `Kube`.
pub struct Http {
    target: Target,
    server_name: ServerName<'static>,
    tls: TlsConnector,
    user_agent: HeaderValue,
    token: TokenFile,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

/// The bearer token, from its file: as last read, read again when older than `every` (a
/// service account's token rotates; the kubelet replaces the file).
struct TokenFile {
    path: PathBuf,
    every: Duration,
    last: Mutex<Option<(HeaderValue, Instant)>>,
}

impl TokenFile {
    fn new(path: PathBuf, every: Duration) -> TokenFile {
        TokenFile {
            path,
            every,
            last: Mutex::new(None),
        }
    }

    /// The `Authorization` header.
    fn header(&self) -> Result<HeaderValue, Failure> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((v, at)) = &*last
            && at.elapsed() < self.every
        {
            return Ok(v.clone());
        }
        let token = read_token(&self.path).map_err(Failure::NoAnswer)?;
        let mut v = HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
            Failure::NoAnswer(format!(
                "token file {}: not a token (a character an HTTP header cannot carry)",
                self.path.display()
            ))
        })?;
        v.set_sensitive(true);
        *last = Some((v.clone(), Instant::now()));
        Ok(v)
    }
}

impl Http {
    /// Reads the CA file and the token file; connects to nothing yet.
    pub fn new(target: Target) -> Result<Http, String> {
        let mut roots = RootCertStore::empty();
        for der in read_ca(&target.ca)? {
            roots.add(der).map_err(|e| {
                format!(
                    "CA file {}: a certificate rustls refuses: {e}",
                    target.ca.display()
                )
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let server_name = ServerName::try_from(target.host.clone())
            .map_err(|e| format!("server name {:?}: {e}", target.host))?;
        read_token(&target.token)?;
        Ok(Http {
            server_name,
            tls: TlsConnector::from(Arc::new(config)),
            user_agent: HeaderValue::from_static(concat!(
                "rdma-host-device-agent/",
                env!("CARGO_PKG_VERSION")
            )),
            token: TokenFile::new(target.token.clone(), TOKEN_REREAD),
            idle: Mutex::new(Vec::new()),
            target,
        })
    }

    fn request(
        &self,
        method: &Method,
        path_and_query: &str,
        body: &Option<Bytes>,
    ) -> Result<Request<Full<Bytes>>, Failure> {
        let mut r = Request::builder()
            .method(method.clone())
            .uri(format!("{}{path_and_query}", self.target.base_path))
            .header(HOST, &self.target.authority)
            .header(AUTHORIZATION, self.token.header()?)
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, self.user_agent.clone());
        if body.is_some() {
            r = r.header(CONTENT_TYPE, "application/json");
        }
        r.body(Full::new(body.clone().unwrap_or_default()))
            .map_err(|e| Failure::NoAnswer(format!("the request {path_and_query:?}: {e}")))
    }

    /// A new connection: TCP, TLS (the CA file's certificates only), HTTP/1.1.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, Failure> {
        let t = &self.target;
        let tcp = tokio::net::TcpStream::connect((t.host.as_str(), t.port))
            .await
            .map_err(|e| Failure::NoAnswer(format!("connect to {}: {e}", t.authority)))?;
        let _ = tcp.set_nodelay(true);
        let tls = self
            .tls
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| {
                Failure::NoAnswer(format!(
                    "TLS with {}: {e} (its certificate is checked against {} alone: is that the CA that signed it?)",
                    t.authority,
                    t.ca.display()
                ))
            })?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| Failure::NoAnswer(format!("HTTP with {}: {e}", t.authority)))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    fn take_idle(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(s) = idle.pop() {
            if s.is_ready() && !s.is_closed() {
                return Some(s);
            }
        }
        None
    }

    fn put_idle(&self, s: SendRequest<Full<Bytes>>) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(s);
        }
    }

    /// Send, on an idle connection if there is one: the answer's head, and the connection to
    /// give back once its body is read. A kept connection the server closed meanwhile fails
    /// without an answer: then once more on a new one. (Had the server taken the request
    /// before closing, the second is still safe: every write here is conditional, on a
    /// resourceVersion or a uid, or a create, which the second time answers 409.)
    async fn send(
        &self,
        method: &Method,
        path_and_query: &str,
        body: Option<Bytes>,
        pooled: bool,
    ) -> Result<(Response<Incoming>, SendRequest<Full<Bytes>>), Failure> {
        if pooled && let Some(mut s) = self.take_idle() {
            match s
                .send_request(self.request(method, path_and_query, &body)?)
                .await
            {
                Ok(r) => return Ok((r, s)),
                Err(e) if e.is_canceled() || e.is_incomplete_message() || e.is_closed() => {}
                Err(e) => return Err(self.http_failure(e)),
            }
        }
        let mut s = self.connect().await?;
        let r = s
            .send_request(self.request(method, path_and_query, &body)?)
            .await
            .map_err(|e| self.http_failure(e))?;
        Ok((r, s))
    }

    fn http_failure(&self, e: hyper::Error) -> Failure {
        Failure::NoAnswer(format!("HTTP with {}: {e}", self.target.authority))
    }

    /// One request and its whole answer, within `REQUEST_TIMEOUT`: the body of a 2xx answer,
    /// or the failure.
    pub async fn call(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Bytes, Failure> {
        let work = async {
            let (resp, conn) = self
                .send(&method, path_and_query, body.map(Bytes::from), true)
                .await?;
            let status = resp.status();
            let bytes = read_body(resp.into_body(), MAX_BODY)
                .await
                .map_err(Failure::NoAnswer)?;
            self.put_idle(conn);
            if status.is_success() {
                Ok(bytes)
            } else {
                Err(Failure::from_answer(status, &bytes))
            }
        };
        tokio::time::timeout(REQUEST_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| {
                Err(Failure::NoAnswer(format!(
                    "no answer within {}s",
                    REQUEST_TIMEOUT.as_secs()
                )))
            })
    }

    /// A GET whose answer is a stream (a watch), on a connection of its own: the body once the
    /// head came (within `REQUEST_TIMEOUT`), for the caller to read with its own bounds.
    pub async fn stream(&self, path_and_query: &str) -> Result<Incoming, Failure> {
        let work = async {
            let (resp, _conn) = self.send(&Method::GET, path_and_query, None, false).await?;
            let status = resp.status();
            if status.is_success() {
                return Ok(resp.into_body());
            }
            let bytes = read_body(resp.into_body(), MAX_BODY)
                .await
                .map_err(Failure::NoAnswer)?;
            Err(Failure::from_answer(status, &bytes))
        };
        tokio::time::timeout(REQUEST_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| {
                Err(Failure::NoAnswer(format!(
                    "no answer within {}s",
                    REQUEST_TIMEOUT.as_secs()
                )))
            })
    }
}

/// A whole body, refused past `limit` bytes (before holding them).
pub async fn read_body<B>(mut body: B, limit: usize) -> Result<Bytes, String>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    if let Some(n) = body.size_hint().exact()
        && n > limit as u64
    {
        return Err(format!("an answer of {n} bytes, over the {limit} read"));
    }
    let mut out: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading the answer: {e}"))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(format!("an answer over {limit} bytes: not read further"));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(out))
}

/// The token in `path`, which must hold it alone: whitespace around it (a trailing newline from
/// `echo`) is refused with the fix rather than sent, or silently trimmed into a different
/// token than the file shows.
pub fn read_token(path: &Path) -> Result<String, String> {
    let mut t = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOKEN).read_to_string(&mut t))
        .map_err(|e| format!("token file {}: {e}", path.display()))?;
    if t.trim().is_empty() {
        return Err(format!("token file {} is empty", path.display()));
    }
    if t.trim() != t {
        return Err(format!(
            "token file {} has white space around the token (a trailing newline?), which would be sent as part of it: write the token alone (printf %s \"$TOKEN\" > FILE)",
            path.display()
        ));
    }
    Ok(t)
}

/// The CA file's certificates (PEM).
fn read_ca(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let text = std::fs::read(path).map_err(|e| format!("CA file {}: {e}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("CA file {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "CA file {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(certs)
}

/// `s` for a URL's path segment or query value: everything but the unreserved characters
/// percent-encoded.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::StreamBody;
    use hyper::body::Frame;

    fn chunks(
        parts: Vec<Vec<u8>>,
    ) -> StreamBody<impl futures::Stream<Item = Result<Frame<Bytes>, String>> + Unpin> {
        StreamBody::new(futures::stream::iter(
            parts.into_iter().map(|p| Ok(Frame::data(Bytes::from(p)))),
        ))
    }

    #[test]
    fn an_answer_over_the_limit_is_refused_before_it_is_held() {
        let rt = crate::async_rt::current_thread().unwrap();
        rt.block_on(async {
            let ok = read_body(chunks(vec![vec![b'a'; 10], vec![b'b'; 6]]), 16).await;
            assert_eq!(ok.unwrap().len(), 16);
            let e = read_body(chunks(vec![vec![b'a'; 10], vec![b'b'; 7]]), 16)
                .await
                .unwrap_err();
            assert!(e.contains("over 16 bytes"), "{e}");
            // A body that says its length up front is refused before the first byte is read.
            let e = read_body(Full::new(Bytes::from(vec![0u8; 17])), 16)
                .await
                .unwrap_err();
            assert!(e.contains("17 bytes"), "{e}");
        });
    }

    #[test]
    fn an_error_answer_says_the_servers_reason_and_message() {
        let f = Failure::from_answer(
            StatusCode::CONFLICT,
            br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"resourceslices \"a\" already exists","reason":"AlreadyExists","details":{"name":"a"},"code":409}"#,
        );
        assert_eq!(
            f,
            Failure::Answer {
                code: 409,
                reason: "AlreadyExists".into(),
                message: "resourceslices \"a\" already exists".into()
            }
        );
        // A path the server does not serve answers plain text: no Status reason, so the
        // caller's hint for a 404 that is not an object's NotFound applies.
        let f = Failure::from_answer(StatusCode::NOT_FOUND, b"404 page not found\n");
        assert_eq!(
            f,
            Failure::Answer {
                code: 404,
                reason: "Not Found".into(),
                message: "404 page not found".into()
            }
        );
        let Failure::Answer { message, .. } =
            Failure::from_answer(StatusCode::BAD_GATEWAY, &[b'x'; 5000])
        else {
            unreachable!()
        };
        assert_eq!(message.len(), 203, "a long body is cut");
    }

    #[test]
    fn names_and_selectors_are_escaped_for_the_url() {
        assert_eq!(
            escape("spec.driver=rdma-host-device.io,spec.nodeName=n1"),
            "spec.driver%3Drdma-host-device.io%2Cspec.nodeName%3Dn1"
        );
        assert_eq!(escape("a/../b c"), "a%2F..%2Fb%20c");
    }

    #[test]
    fn the_token_is_read_again_once_the_last_reading_is_old_enough() {
        let dir = std::env::temp_dir().join(format!("rhd-kube-rotate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "first").unwrap();
        let hourly = TokenFile::new(f.clone(), Duration::from_secs(3600));
        let always = TokenFile::new(f.clone(), Duration::ZERO);
        assert_eq!(hourly.header().unwrap(), "Bearer first");
        assert_eq!(always.header().unwrap(), "Bearer first");
        assert!(always.header().unwrap().is_sensitive());
        std::fs::write(&f, "second").unwrap();
        assert_eq!(hourly.header().unwrap(), "Bearer first", "not yet");
        assert_eq!(always.header().unwrap(), "Bearer second");
        // A rotation caught half-way (an empty file) fails this request, not the next ones.
        std::fs::write(&f, "").unwrap();
        assert!(always.header().is_err());
        std::fs::write(&f, "third").unwrap();
        assert_eq!(always.header().unwrap(), "Bearer third");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_token_file_must_hold_the_token_alone() {
        let dir = std::env::temp_dir().join(format!("rhd-kube-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "abc").unwrap();
        assert_eq!(read_token(&f).unwrap(), "abc");
        std::fs::write(&f, "abc\n").unwrap();
        assert!(read_token(&f).unwrap_err().contains("trailing newline"));
        std::fs::write(&f, "").unwrap();
        assert!(read_token(&f).unwrap_err().contains("empty"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
