//! The gRPC side: one pool's `DevicePlugin` service on its unix socket, and its registration
//! with the kubelet (`Registration.Register` on `kubelet.sock`), kept alive across kubelet
//! restarts by the kubelet-plugin server (`kubelet_grpc`).
//!
//! The service is routed by hand (the five paths of `api::path`), each method a
//! `tonic::server::Grpc` call with prost's codec: what tonic-build would generate, without a
//! build step. The kubelet's restart is seen by polling (every `WATCH_TICK`): it deletes every
//! socket in the directory (ours too: serve anew, register again; `kubelet_grpc::socket`) and
//! creates a new `kubelet.sock` (register again; `kubelet_grpc::registration::KubeletSock`).

use super::allocate;
use super::api::{self, path};
use crate::kubelet_grpc::{self, registration, socket};
use futures::Stream;
use rdma_host_device_core::inventory::Nic;
use rdma_host_device_core::node::{CharDevices, Pool};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

/// How often the sockets are checked for a kubelet restart.
pub const WATCH_TICK: Duration = Duration::from_millis(200);
/// A call to the kubelet gives up after this long.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest wait between two refused registrations (they start at `WATCH_TICK` and double):
/// each call makes the kubelet dial us and log an error.
const REGISTER_RETRY_MAX: Duration = Duration::from_secs(10);

/// One pool as a device plugin: what it offers, and how it answers.
pub struct Plugin {
    pub pool: Pool,
    pub chars: CharDevices,
    /// Where the per-NIC env specs go (`devicePlugin.nicEnv`): `Allocate` names each NIC's.
    pub nic_env: Option<rdma_host_device_core::nic_env::Place>,
    pub device_info_dir: PathBuf,
    /// `/sys` (a fake tree in unit tests).
    pub sys: PathBuf,
    /// Every NIC this pool has offered since the start, by ID.
    pub nics: Mutex<BTreeMap<String, Nic>>,
    /// The device list `ListAndWatch` streams: a new value is a new message.
    pub devices: watch::Sender<Vec<api::Device>>,
}

type Stream_ = Pin<Box<dyn Stream<Item = Result<api::ListAndWatchResponse, Status>> + Send>>;

impl Plugin {
    /// Our socket's file name in the kubelet's directory: one per pool.
    pub fn endpoint(&self) -> String {
        format!(
            "rdma-host-device-{}.sock",
            self.pool
                .env_suffix()
                .to_ascii_lowercase()
                .replace('_', "-")
        )
    }

    pub fn options() -> api::DevicePluginOptions {
        api::DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }
    }

    fn list_and_watch(&self) -> Stream_ {
        let rx = self.devices.subscribe();
        Box::pin(futures::stream::unfold(
            (rx, true),
            |(mut rx, first)| async move {
                if !first && rx.changed().await.is_err() {
                    return None;
                }
                let devices = rx.borrow_and_update().clone();
                Some((Ok(api::ListAndWatchResponse { devices }), (rx, false)))
            },
        ))
    }

    fn preferred(
        &self,
        req: api::PreferredAllocationRequest,
    ) -> Result<api::PreferredAllocationResponse, Status> {
        let nics = self.nics.lock().unwrap_or_else(|e| e.into_inner());
        let container_responses = req
            .container_requests
            .into_iter()
            .map(|c| {
                let available: Vec<allocate::Offer> = c
                    .available_device_ids
                    .iter()
                    .map(|id| allocate::Offer {
                        id: id.clone(),
                        numa: nics.get(id).and_then(|n| n.numa),
                        pci_root: nics.get(id).and_then(|n| n.pci_root.clone()),
                    })
                    .collect();
                let size = usize::try_from(c.allocation_size).unwrap_or(0);
                api::ContainerPreferredAllocationResponse {
                    device_ids: allocate::preferred(&available, &c.must_include_device_ids, size),
                }
            })
            .collect();
        Ok(api::PreferredAllocationResponse {
            container_responses,
        })
    }

    fn allocate(&self, req: api::AllocateRequest) -> Result<api::AllocateResponse, Status> {
        let known = self.nics.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut out = api::AllocateResponse::default();
        for c in req.container_requests {
            let mut nics = Vec::new();
            for id in &c.devices_ids {
                let nic = known.get(id).ok_or_else(|| {
                    Status::not_found(format!(
                        "device {id:?} is not one of {}'s ({})",
                        self.pool.resource_name,
                        known.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                })?;
                nics.push(nic);
            }
            for nic in &nics {
                if let Err(e) = allocate::write_device_info(&self.device_info_dir, &self.pool, nic)
                {
                    log::warn!("{e} (Multus will not see {}'s device-info)", nic.id);
                }
            }
            let mut r = allocate::container_response(&self.pool, &nics, self.chars, &self.sys);
            if let Some(place) = &self.nic_env {
                r.cdi_devices
                    .extend(allocate::nic_env(place, &nics).map_err(|e| {
                        log::error!("allocating {}: {e}", c.devices_ids.join(","));
                        Status::internal(e)
                    })?);
            }
            log::info!(
                "allocated {} to a container: {} char device(s), {}",
                c.devices_ids.join(","),
                r.devices.len(),
                r.envs
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            out.container_responses.push(r);
        }
        Ok(out)
    }
}

/// The `DevicePlugin` gRPC service of one pool.
#[derive(Clone)]
pub struct Service(pub Arc<Plugin>);

impl kubelet_grpc::Routed for Service {
    fn route(&self, req: kubelet_grpc::Call) -> kubelet_grpc::Answer {
        let p = self.0.clone();
        match req.uri().path() {
            path::GET_OPTIONS => Box::pin(async move {
                Ok(kubelet_grpc::unary_now(req, |_: api::Empty| Ok(Plugin::options())).await)
            }),
            path::ALLOCATE => {
                Box::pin(
                    async move { Ok(kubelet_grpc::unary_now(req, move |r| p.allocate(r)).await) },
                )
            }
            path::GET_PREFERRED => {
                Box::pin(
                    async move { Ok(kubelet_grpc::unary_now(req, move |r| p.preferred(r)).await) },
                )
            }
            path::PRE_START => Box::pin(async move {
                Ok(
                    kubelet_grpc::unary_now(req, |_: api::PreStartContainerRequest| {
                        Ok(api::PreStartContainerResponse {})
                    })
                    .await,
                )
            }),
            path::LIST_AND_WATCH => Box::pin(async move {
                let svc = tower::service_fn(move |_: Request<api::Empty>| {
                    let s = p.list_and_watch();
                    async move { Ok::<_, Status>(Response::new(s)) }
                });
                Ok(tonic::server::Grpc::new(
                    ProstCodec::<api::ListAndWatchResponse, api::Empty>::default(),
                )
                .server_streaming(svc, req)
                .await)
            }),
            other => kubelet_grpc::unimplemented(other),
        }
    }
}

/// Whether the kubelet's refusal of a Register says it is connected to our `endpoint` already:
/// it answered an earlier Register after our deadline, yet connected (1.37's device manager
/// refuses a second connection to one socket: "device plugin already connected: <path>").
fn connected_already(refusal: &str, endpoint: &str) -> bool {
    const SAID: &str = "device plugin already connected: ";
    refusal.find(SAID).is_some_and(|at| {
        let rest = &refusal[at + SAID.len()..];
        let path = rest.split(" (").next().unwrap_or(rest);
        Path::new(path.trim()).file_name() == Some(std::ffi::OsStr::new(endpoint))
    })
}

/// Serve `plugin` on its socket in `dir` and keep it registered with the kubelet, forever:
/// `Registration.Register` on `<dir>/kubelet.sock` (within `REGISTER_TIMEOUT`), again at each
/// new `kubelet.sock` (a kubelet restart).
pub async fn supervise(plugin: Arc<Plugin>, dir: PathBuf) {
    let endpoint = plugin.endpoint();
    let resource = plugin.pool.resource_name.clone();
    let served = socket::Plugin {
        name: resource.clone(),
        sockets: vec![socket::Endpoint {
            path: dir.join(&endpoint),
            service: kubelet_grpc::service(Service(plugin.clone())),
            dialled: kubelet_grpc::Dialled::Localhost,
        }],
        tick: WATCH_TICK,
    };
    let kubelet = dir.join(api::KUBELET_SOCKET);
    let req = api::RegisterRequest {
        version: api::VERSION.into(),
        endpoint: endpoint.clone(),
        resource_name: resource.clone(),
        options: Some(Plugin::options()),
    };
    let call = Arc::new(registration::KubeletCall {
        register: Arc::new({
            let kubelet = kubelet.clone();
            move || {
                let (kubelet, req) = (kubelet.clone(), req.clone());
                Box::pin(async move {
                    registration::call::<_, api::Empty>(
                        kubelet,
                        path::REGISTER,
                        req,
                        REGISTER_TIMEOUT,
                    )
                    .await
                    .map(|_| ())
                })
            }
        }),
        kubelet,
        name: resource,
        endpoint,
        done: connected_already,
        retry: WATCH_TICK,
        retry_max: REGISTER_RETRY_MAX,
    });
    socket::supervise(served, move || registration::KubeletSock::new(call.clone())).await
}

#[cfg(test)]
mod tests {
    use super::connected_already;

    #[test]
    fn a_refusal_naming_our_socket_as_connected_is_a_registration() {
        let ours = "rdma-host-device.io-rail.sock";
        let said = |path: &str| {
            format!("the kubelet refused: device plugin already connected: {path} (Unknown)")
        };
        assert!(connected_already(
            &said("/var/lib/kubelet/device-plugins/rdma-host-device.io-rail.sock"),
            ours
        ));
        assert!(
            !connected_already(&said("/var/lib/kubelet/device-plugins/other.sock"), ours),
            "another plugin's socket"
        );
        assert!(
            !connected_already("the kubelet refused: invalid resource name (Unknown)", ours),
            "another refusal"
        );
        assert!(!connected_already("no answer within 5 s", ours));
    }
}
