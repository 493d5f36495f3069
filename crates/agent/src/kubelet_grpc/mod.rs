//! The kubelet-plugin server under both the device plugin and the DRA driver: our gRPC
//! services on unix sockets, as the kubelet and its plugin watcher dial them.
//!
//! - `socket.rs`: each socket created 0600 and served, and the supervision: a socket removed
//!   (a kubelet restart) or a server stopped, and all are served anew and registered again;
//! - `registration.rs`: how the kubelet learns of a plugin: the plugin watcher's registration
//!   service (the DRA driver; its supported versions are the caller's), or a call on the
//!   kubelet's socket made again at each kubelet restart (the device plugin's `Register`);
//! - `authority.rs`: the wire fix the plugin watcher's registration client needs (it names the
//!   socket's path as HTTP/2 `:authority`, which our HTTP/2 server refuses); only the socket it
//!   dials is read through it ([`Dialled::ByPath`]);
//! - here: [`serve`], and the unary-method helpers the services are routed with ([`unary`]).
mod authority;
#[cfg(any(test, feature = "test-support"))]
pub mod grpc_go_wire;
pub mod registration;
pub mod socket;

use std::future::Future;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{UnixListener, UnixStream};
use tonic::codegen::http;
use tonic::transport::server::Connected;

use authority::KubeletStream;

/// A gRPC service we serve to the kubelet, boxed ([`service`]): one type for [`serve`] and the
/// supervision, whatever the service.
pub type Service = tower::util::BoxCloneSyncService<
    http::Request<tonic::body::Body>,
    http::Response<tonic::body::Body>,
    std::convert::Infallible,
>;

/// A call to one of our services.
pub type Call = http::Request<tonic::body::Body>;
/// The answer to a [`Call`].
pub type Answer =
    tonic::codegen::BoxFuture<http::Response<tonic::body::Body>, std::convert::Infallible>;

/// A gRPC service routed by hand, each method by its path, each unary one with [`unary`]: what
/// tonic-build would generate, without a build step.
pub trait Routed: Clone + Send + Sync + 'static {
    /// The answer to `call`, whose path names the method ([`unimplemented`] for one it does
    /// not serve).
    fn route(&self, call: Call) -> Answer;
}

/// `routed` as a [`Service`].
pub fn service(routed: impl Routed) -> Service {
    Service::new(tower::service_fn(move |call: Call| routed.route(call)))
}

/// How the kubelet's client of a socket names it in HTTP/2 `:authority`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialled {
    /// `localhost`: the device manager (`grpc.WithAuthority("localhost")` since Kubernetes
    /// 1.26) and the DRA manager (`grpc.NewClient("unix:" + path)`).
    Localhost,
    /// The socket's path, which h2 refuses: the plugin watcher's registration client
    /// (`grpc.DialContext(ctx, socketPath, ...)`). Its connections are read through
    /// [`KubeletStream`].
    ByPath,
}

/// Serve `svc` on `listener` until `shutdown` completes; connections of a client that names the
/// socket by its path are read through [`KubeletStream`].
pub fn serve(
    listener: UnixListener,
    svc: Service,
    dialled: Dialled,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>> {
    match dialled {
        Dialled::Localhost => serve_with(listener, svc, shutdown, |s| s),
        Dialled::ByPath => serve_with(listener, svc, shutdown, KubeletStream::new),
    }
}

/// [`serve`], each accepted connection wrapped by `wrap`.
fn serve_with<IO>(
    listener: UnixListener,
    svc: Service,
    shutdown: impl Future<Output = ()> + Send + 'static,
    wrap: fn(UnixStream) -> IO,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>>
where
    IO: Connected + AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let incoming = futures::stream::unfold(listener, move |l| async move {
        loop {
            match l.accept().await {
                Ok((s, _)) => {
                    use std::os::fd::AsRawFd;
                    // Only root (the kubelet) and our own uid: the socket is 0600, and a
                    // descriptor passed on or a process with CAP_DAC_OVERRIDE under another
                    // uid is refused here (issue 47).
                    match rdma_host_device_core::files::check_peer(s.as_raw_fd()) {
                        Ok(()) => return Some((Ok::<_, io::Error>(wrap(s)), l)),
                        Err(e) => log::warn!("refused a connection: {e}"),
                    }
                }
                Err(e) => {
                    // EMFILE and friends: back off rather than spin.
                    log::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .serve_with_incoming_shutdown(svc, incoming, shutdown)
            .await
    })
}

/// A unary method answered by the async `f`.
pub async fn unary<B, Q, A, F>(req: http::Request<B>, f: F) -> http::Response<tonic::body::Body>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    Q: prost::Message + Default + Send + 'static,
    A: prost::Message + Send + 'static,
    F: Fn(Q) -> futures::future::BoxFuture<'static, Result<A, tonic::Status>>
        + Send
        + Clone
        + 'static,
{
    let svc = tower::service_fn(move |r: tonic::Request<Q>| {
        let f = f.clone();
        async move { f(r.into_inner()).await.map(tonic::Response::new) }
    });
    tonic::server::Grpc::new(tonic_prost::ProstCodec::<A, Q>::default())
        .unary(svc, req)
        .await
}

/// [`unary`] for a method whose answer `f` computes at once.
pub async fn unary_now<B, Q, A>(
    req: http::Request<B>,
    f: impl Fn(Q) -> Result<A, tonic::Status> + Send + Sync + Clone + 'static,
) -> http::Response<tonic::body::Body>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    Q: prost::Message + Default + Send + 'static,
    A: prost::Message + Send + 'static,
{
    unary(req, move |q| -> futures::future::BoxFuture<'static, _> {
        Box::pin(std::future::ready(f(q)))
    })
    .await
}

/// The answer to a method `path` a service does not serve.
pub fn unimplemented(path: &str) -> Answer {
    let s = tonic::Status::unimplemented(format!("{path} is not a method we serve"));
    Box::pin(async move { Ok(s.into_http()) })
}
