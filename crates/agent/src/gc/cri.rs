//! The runtime's CRI (`runtime.v1.RuntimeService`, k8s.io/cri-api `pkg/apis/runtime/v1/api.proto`)
//! as far as the GC asks it: `Version` (is this a CRI runtime at all) and `ListPodSandbox`
//! (which sandboxes exist, in any state). Read-only: nothing here creates, stops or removes
//! anything. Hand-written `prost::Message` structs with the upstream field numbers (as
//! `nri::api`), so the build needs no `protoc`; fields we do not read are left out (protobuf
//! skips them). tests/cri/api.proto describes the same messages for the tests' Python client.

use prost::Message;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;
use tonic::Request;
use tonic::codegen::http;
use tonic_prost::ProstCodec;

pub const VERSION: &str = "/runtime.v1.RuntimeService/Version";
pub const LIST_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/ListPodSandbox";

/// The most one answer may hold: a node's sandboxes with their labels and annotations (a few
/// KiB each) for the kubelet's maximum of pods, with room.
const MAX_ANSWER: usize = 64 << 20;

#[derive(Clone, PartialEq, Message)]
pub struct VersionRequest {
    #[prost(string, tag = "1")]
    pub version: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct VersionResponse {
    #[prost(string, tag = "1")]
    pub version: String,
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    #[prost(string, tag = "4")]
    pub runtime_api_version: String,
}

/// Sent empty: no filter, every sandbox in every state.
#[derive(Clone, PartialEq, Message)]
pub struct ListPodSandboxRequest {}

#[derive(Clone, PartialEq, Message)]
pub struct ListPodSandboxResponse {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<PodSandbox>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodSandbox {
    /// What containerd passes to CNI as CNI_CONTAINERID.
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    /// SANDBOX_READY = 0, SANDBOX_NOTREADY = 1: either way the sandbox exists and DEL will come.
    #[prost(int32, tag = "3")]
    pub state: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
}

/// What the runtime said: its name and version, and the ID of every sandbox it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandboxes {
    pub runtime: String,
    pub ids: HashSet<String>,
}

/// Ask the runtime at `socket` (one HTTP/2 connection, closed after) which sandboxes exist,
/// within `deadline` for the whole exchange. Any failure is an `Err` saying what failed: the
/// caller then collects nothing.
pub async fn sandboxes(socket: &Path, deadline: Duration) -> Result<Sandboxes, String> {
    let call = async {
        let io = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", socket.display()))?;
        let (send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(io),
        )
        .await
        .map_err(|e| format!("HTTP/2 handshake with {}: {e}", socket.display()))?;
        let conn = tokio::spawn(conn);
        let svc = tower::service_fn(move |req: http::Request<tonic::body::Body>| {
            let mut send = send.clone();
            async move { send.send_request(req).await }
        });
        let mut grpc =
            tonic::client::Grpc::with_origin(svc, http::Uri::from_static("http://localhost"))
                .max_decoding_message_size(MAX_ANSWER);
        let answer = async {
            grpc.ready()
                .await
                .map_err(|e| format!("connection not ready: {e}"))?;
            let v = grpc
                .unary::<_, VersionResponse, _>(
                    Request::new(VersionRequest {
                        version: "v1".into(),
                    }),
                    http::uri::PathAndQuery::from_static(VERSION),
                    ProstCodec::default(),
                )
                .await
                .map_err(|s| format!("Version: {} ({:?})", s.message(), s.code()))?
                .into_inner();
            grpc.ready()
                .await
                .map_err(|e| format!("connection not ready: {e}"))?;
            let list = grpc
                .unary::<_, ListPodSandboxResponse, _>(
                    Request::new(ListPodSandboxRequest {}),
                    http::uri::PathAndQuery::from_static(LIST_POD_SANDBOX),
                    ProstCodec::default(),
                )
                .await
                .map_err(|s| format!("ListPodSandbox: {} ({:?})", s.message(), s.code()))?
                .into_inner();
            Ok(Sandboxes {
                runtime: format!("{} {}", v.runtime_name, v.runtime_version),
                ids: list.items.into_iter().map(|s| s.id).collect(),
            })
        }
        .await;
        conn.abort();
        answer
    };
    tokio::time::timeout(deadline, call).await.map_err(|_| {
        format!(
            "{} did not answer within {} s",
            socket.display(),
            deadline.as_secs()
        )
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sandbox as containerd encodes it, with the fields we skip (labels, annotations,
    /// runtime handler): read right, the rest ignored.
    #[test]
    fn a_sandbox_with_fields_we_do_not_read_decodes() {
        // PodSandbox { id: "abc", metadata: {name: "p", uid: "u", namespace: "n", attempt: 1},
        // state: NOTREADY, created_at: 5, labels: {"k": "v"}, runtime_handler: "runc" }
        let mut b = Vec::new();
        let meta = [
            0x0a, 1, b'p', 0x12, 1, b'u', 0x1a, 1, b'n', 0x20, 1, // attempt = 1
        ];
        b.extend_from_slice(&[0x0a, 3, b'a', b'b', b'c']);
        b.push(0x12);
        b.push(meta.len() as u8);
        b.extend_from_slice(&meta);
        b.extend_from_slice(&[0x18, 1, 0x20, 5]);
        b.extend_from_slice(&[0x2a, 6, 0x0a, 1, b'k', 0x12, 1, b'v']);
        b.extend_from_slice(&[0x3a, 4, b'r', b'u', b'n', b'c']);
        let mut list = vec![0x0a, b.len() as u8];
        list.extend_from_slice(&b);
        let r = ListPodSandboxResponse::decode(list.as_slice()).unwrap();
        assert_eq!(r.items.len(), 1);
        assert_eq!(r.items[0].id, "abc");
        assert_eq!(r.items[0].state, 1);
        let m = r.items[0].metadata.as_ref().unwrap();
        assert_eq!((m.name.as_str(), m.namespace.as_str()), ("p", "n"));
    }

    /// No runtime at the socket: an error naming the socket, quickly.
    #[test]
    fn no_runtime_is_an_error_naming_the_socket() {
        let rt = crate::async_rt::current_thread().unwrap();
        let e = rt
            .block_on(sandboxes(
                Path::new("/nonexistent/containerd.sock"),
                Duration::from_secs(2),
            ))
            .unwrap_err();
        assert!(e.contains("/nonexistent/containerd.sock"), "{e}");
    }
}
