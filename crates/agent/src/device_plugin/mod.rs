//! `rdma-host-device-agent device-plugin`: a kubelet device plugin (API `v1beta1`) that offers the
//! node's NICs as extended resources, one per pool of the node configuration's
//! `devicePlugin`, so the scheduler counts NICs, the Topology Manager sees their NUMA nodes,
//! and a pod gets its NIC's RDMA char devices and learns its names. Multus then hands the
//! allocated NIC's ID to the CNI as `deviceID`.
//!
//! - `api.rs`: the v1beta1 messages, hand-written `prost::Message` structs.
//! - `pool.rs`: which NICs each pool offers (selectors, node policy), their IDs and NUMA nodes.
//! - `allocate.rs`: `Allocate` (char devices, env, device-info files), `GetPreferredAllocation`.
//! - `server.rs`: the gRPC service per pool, registration, kubelet restarts.
//!
//! Healthy or Unhealthy is `crate::health`'s verdict, the one judge the DRA driver serves too.
//!
//! Why hand-written messages and routing rather than tonic-build: tonic-build needs `protoc`
//! (or protox and a build script) at build time, for twenty small messages and five methods
//! that the kubelet has kept wire-compatible since 2018. Hand-written, the build has no step
//! and the wire contract is checked from outside: the integration test's kubelet is generated
//! from our own `tests/device_plugin/deviceplugin.proto` by grpcio-tools.
//!
//! Nothing here runs in a CNI call: the CNI verbs never reach this module (main.rs sends them to
//! `flows`), and they keep the node configuration's `devicePlugin` as unparsed text
//! (`Node::device_plugin` parses it, for this module and `node-config`).

pub mod allocate;
pub mod api;
pub mod pool;
pub mod server;

use crate::error::{Result, invalid};
use crate::flags::absolute_path;
use crate::health;
use rdma_host_device_core::link::Links;
use rdma_host_device_core::node::{DevicePluginConfig, Node};
use rdma_host_device_core::state::Store;
use server::Plugin;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the kubelet looks for device plugins.
pub(crate) const DEFAULT_SOCKET_DIR: &str = "/var/lib/kubelet/device-plugins";
/// How often health is read (sysfs, cheap): a change reaches `ListAndWatch` within this.
const HEALTH_TICK: Duration = Duration::from_millis(200);
/// Every this many health ticks, the NICs are discovered again (netlink: uplink checks).
const DISCOVER_EVERY: u32 = 25;
/// A discovery (link, address and route dumps) gives up after this long.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// `device-plugin [--socket-dir DIR] [--device-info-dir DIR] [--state-dir DIR]
/// [--cdi-spec FILE]`.
#[derive(Debug, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// The kubelet's device-plugins directory, where kubelet.sock is
    #[arg(long, value_name = "DIR", default_value = DEFAULT_SOCKET_DIR, value_parser = absolute_path)]
    pub socket_dir: PathBuf,
    /// Where the device-info files Multus reads are written
    #[arg(long, value_name = "DIR", default_value = allocate::DEFAULT_DEVICE_INFO_DIR, value_parser = absolute_path)]
    pub device_info_dir: PathBuf,
    /// The attachments' state directory [default: the node configuration's stateDir]
    #[arg(long, value_name = "DIR", value_parser = absolute_path)]
    pub state_dir: Option<PathBuf>,
    /// Keep this CDI spec up to date (`cdi::refresh`) at every discovery, its memlock hook the
    /// node configuration's cdiHook (as the install container's `cdi` writes it).
    #[arg(long, value_name = "FILE", value_parser = absolute_path)]
    pub cdi_spec: Option<PathBuf>,
    #[command(flatten)]
    pub dev: crate::cdi::DevDir,
}

/// Run the device plugin until killed; returns only if it cannot start.
pub fn run(opts: &Options) -> Result<()> {
    std::panic::set_hook(Box::new(|info| {
        eprintln!("rdma-host-device-agent device-plugin: bug: {info}");
    }));
    rdma_host_device_core::logging::init(log::LevelFilter::Info, None, " device-plugin".into());
    let node = Node::load()?;
    let Some(dp) = node.device_plugin()? else {
        // A node that serves its extended resource through DRA has no pools, and must offer
        // none (the scheduler would never ask DRA): nothing to do, and not an error, so the
        // DaemonSet's container stays up rather than restarting for ever.
        if let Some(name) = node.dra()?.and_then(|d| d.extended_resource_name) {
            log::info!(
                "no devicePlugin in {}: this node serves {name} through DRA (dra.extendedResourceName); offering nothing",
                node.source
            );
            loop {
                std::thread::park();
            }
        }
        return Err(invalid(format!(
            "the node configuration ({}) has no devicePlugin: no pool to offer (see docs/devices.md, \"Device plugin\"; a node whose extended resource DRA serves says so with dra.extendedResourceName, and this then idles)",
            node.source
        )));
    };
    if !opts.socket_dir.is_dir() {
        return Err(invalid(format!(
            "{} is not a directory (the kubelet's device-plugins directory; --socket-dir)",
            opts.socket_dir.display()
        )));
    }
    let state_dir = opts.state_dir.clone().unwrap_or(node.state_dir.clone());
    let mut cdi = match &opts.cdi_spec {
        None => None,
        Some(path) => Some(CdiKeeper {
            path: path.clone(),
            dev: opts.dev.clone(),
            hook: crate::cdi::Hook::of(&node, None)?,
            last_error: String::new(),
        }),
    };
    let plugins: Vec<Arc<Plugin>> = dp
        .pools
        .iter()
        .map(|p| {
            Arc::new(Plugin {
                pool: p.clone(),
                chars: dp.char_devices,
                nic_env: dp.nic_env.as_ref().and_then(|e| e.place()),
                device_info_dir: opts.device_info_dir.clone(),
                sys: PathBuf::from("/sys"),
                nics: Mutex::new(BTreeMap::new()),
                devices: tokio::sync::watch::channel(Vec::new()).0,
            })
        })
        .collect();
    let rt = crate::async_rt::current_thread()?;
    rt.block_on(async move {
        let host = Links::open()?;
        let store = Store::new(&state_dir);
        // The first device list before the kubelet can ask for it.
        let mut watcher = Watcher::default();
        watcher
            .discover(&host, &store, &dp, &node, &plugins, Path::new("/sys"))
            .await;
        watcher.health(&store, &plugins, Path::new("/sys"));
        if let Some(c) = &mut cdi {
            c.refresh();
        }
        for p in &plugins {
            tokio::spawn(server::supervise(p.clone(), opts.socket_dir.clone()));
        }
        let mut tick = 0u32;
        loop {
            tokio::time::sleep(HEALTH_TICK).await;
            tick = tick.wrapping_add(1);
            if tick.is_multiple_of(DISCOVER_EVERY) {
                watcher
                    .discover(&host, &store, &dp, &node, &plugins, Path::new("/sys"))
                    .await;
                if let Some(c) = &mut cdi {
                    c.refresh();
                }
            }
            watcher.health(&store, &plugins, Path::new("/sys"));
        }
    })
}

/// The CDI spec the device plugin keeps current (`--cdi-spec`): a device loaded after the
/// DaemonSet's pod started gets its CDI name within one discovery.
struct CdiKeeper {
    path: PathBuf,
    dev: crate::cdi::DevDir,
    hook: crate::cdi::Hook,
    last_error: String,
}

impl CdiKeeper {
    fn refresh(&mut self) {
        let sys = Path::new("/sys");
        match crate::cdi::refresh(&self.path, sys, &self.dev, &self.hook) {
            Ok(Some(n)) => {
                log::info!(
                    "CDI spec {} written: {n} RDMA device(s) as {}=uverbsN, {}",
                    self.path.display(),
                    crate::cdi::KIND,
                    self.hook.describe()
                );
                self.last_error.clear();
            }
            Ok(None) => self.last_error.clear(),
            Err(e) if e.to_string() != self.last_error => {
                log::warn!("{e}; retrying at the next discovery");
                self.last_error = e.to_string();
            }
            Err(_) => {}
        }
    }
}

/// What the last discovery and health pass found, to log only what changed.
#[derive(Default)]
struct Watcher {
    notes: Vec<String>,
    /// The last verdict of each NIC that was not Healthy, to log changes only.
    unhealthy: BTreeMap<String, String>,
    judge: health::Judge,
}

impl Watcher {
    /// Find the pools' NICs again; a NIC once offered stays known (and is judged by health).
    async fn discover(
        &mut self,
        host: &Links,
        store: &Store,
        dp: &DevicePluginConfig,
        node: &Node,
        plugins: &[Arc<Plugin>],
        sys: &Path,
    ) {
        let nics = match tokio::time::timeout(
            DISCOVER_TIMEOUT,
            pool::gather(host, store, dp, sys, &node.uppers_socket),
        )
        .await
        {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                log::warn!("finding the pools' NICs: {e}; keeping the last list");
                return;
            }
            Err(_) => {
                log::warn!(
                    "finding the pools' NICs took over {} s (netlink); keeping the last list",
                    DISCOVER_TIMEOUT.as_secs()
                );
                return;
            }
        };
        let (pools, notes) = pool::assign(dp, node, nics);
        for n in notes.iter().filter(|n| !self.notes.contains(n)) {
            log::info!("{n}");
        }
        self.notes = notes;
        for (p, found) in plugins.iter().zip(pools) {
            let mut known = p.nics.lock().unwrap_or_else(|e| e.into_inner());
            for nic in found {
                if !known.contains_key(&nic.id) {
                    log::info!(
                        "{}: offering {} ({}{})",
                        p.pool.resource_name,
                        nic.id,
                        nic.name,
                        nic.rdma_device
                            .as_deref()
                            .map(|r| format!(", RDMA device {r}"))
                            .unwrap_or_default()
                    );
                }
                known.insert(nic.id.clone(), nic);
            }
            if let Some(place) = &p.nic_env {
                for nic in known.values() {
                    self.ensure_env(place, nic);
                }
            }
        }
    }

    /// NIC `nic`'s env spec at generation 1 if it has none (`nic_env::ensure`): a CDI name the
    /// kubelet's checkpoint still gives containers after a node restart (`/var/run/cdi` is a
    /// tmpfs) resolves again. Failures are logged once until they change.
    fn ensure_env(
        &mut self,
        place: &rdma_host_device_core::nic_env::Place,
        nic: &rdma_host_device_core::inventory::Nic,
    ) {
        match rdma_host_device_core::nic_env::ensure(place, &nic.id, nic.rdma_device.as_deref()) {
            Ok(true) => log::info!(
                "{} written at generation 1 (the NIC had no env spec)",
                rdma_host_device_core::nic_env::cdi_id(&nic.id)
            ),
            Ok(false) => {}
            Err(e) => {
                let e = format!(
                    "cannot write the env spec of {} in {}: {e}; a container given it will not be created",
                    nic.id,
                    place.cdi_dir.display()
                );
                if !self.notes.contains(&e) {
                    log::warn!("{e}");
                    self.notes.push(e);
                }
            }
        }
    }

    /// Judge every known NIC now (where it is: a NIC in a pod is looked at in its pod's netns)
    /// and publish each pool's list if it changed.
    fn health(&mut self, store: &Store, plugins: &[Arc<Plugin>], sys: &Path) {
        let attached = rdma_host_device_core::inventory::attached(store);
        let now = std::time::Instant::now();
        for p in plugins {
            let known = p.nics.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let devices: Vec<api::Device> = known
                .values()
                .map(|nic| {
                    let mut nic = nic.clone();
                    nic.pod = attached.get(&nic.id).cloned();
                    nic.attached = nic.pod.is_some();
                    let verdict = self.judge.judge(&nic, &health::look(sys, &nic), now);
                    self.note(&p.pool.resource_name, &nic, &verdict);
                    api::Device {
                        id: nic.id.clone(),
                        // Unknown (a pod's netns out of reach) is not a fault the kubelet
                        // should act on: ListAndWatch has no third value.
                        health: if verdict.is_unhealthy() {
                            api::UNHEALTHY
                        } else {
                            api::HEALTHY
                        }
                        .into(),
                        topology: nic.numa.map(|n| api::TopologyInfo {
                            nodes: vec![api::NumaNode { id: n }],
                        }),
                    }
                })
                .collect();
            p.devices.send_if_modified(|d| {
                let changed = *d != devices;
                if changed {
                    *d = devices;
                }
                changed
            });
        }
    }

    fn note(
        &mut self,
        pool: &str,
        nic: &rdma_host_device_core::inventory::Nic,
        verdict: &health::Health,
    ) {
        let why = match verdict {
            health::Health::Healthy => None,
            other => Some(other.message()),
        };
        match why {
            Some(why) if self.unhealthy.get(&nic.id) != Some(&why) => {
                if verdict.is_unhealthy() {
                    log::warn!("{pool}: {} ({}) is Unhealthy: {why}", nic.id, nic.name);
                } else {
                    log::info!("{pool}: {} ({}) is not judged: {why}", nic.id, nic.name);
                }
                self.unhealthy.insert(nic.id.clone(), why);
            }
            None if self.unhealthy.remove(&nic.id).is_some() => {
                log::info!("{pool}: {} ({}) is Healthy again", nic.id, nic.name);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(a: &[&str]) -> std::result::Result<Options, clap::Error> {
        use clap::{Args, FromArgMatches};
        let cmd = Options::augment_args(clap::Command::new("device-plugin"));
        Options::from_arg_matches(&cmd.try_get_matches_from(["device-plugin"].iter().chain(a))?)
    }

    #[test]
    fn device_plugin_flags() {
        let o = options(&["--socket-dir", "/k", "--device-info-dir=/d"]).unwrap();
        assert_eq!(o.socket_dir, PathBuf::from("/k"));
        assert_eq!(o.device_info_dir, PathBuf::from("/d"));
        assert_eq!(o.state_dir, None);
        assert_eq!(o.cdi_spec, None);
        let o = options(&["--cdi-spec", "/c/s.json"]).unwrap();
        assert_eq!(o.cdi_spec, Some(PathBuf::from("/c/s.json")));
        // The hook's path is the node configuration's cdiHook, never a flag of its own.
        assert!(options(&["--cdi-spec", "/c/s.json", "--cdi-hook=/h"]).is_err());
        let o = options(&[]).unwrap();
        assert_eq!(o.socket_dir, PathBuf::from(DEFAULT_SOCKET_DIR));
        for bad in [
            &["--socket-dir"][..],
            &["--socket-dir", "rel"],
            &["-x"],
            &["--cdi-spec", "rel.json"],
        ] {
            assert!(options(bad).is_err(), "{bad:?}");
        }
    }
}
