//! The real cluster: Kubernetes 1.37 and containerd 2.4 of tests/cluster/cluster.sh, built from
//! their Go modules, one node, started once for the whole binary and shared, one test at a
//! time (`Cluster::shared`).
//! - `quickstart`: README.md's quick start, read from the README;
//! - `pods`: pods given NICs through the device plugin, DRA and Multus;
//! - `gc`: leaks collected without the runtime's help;
//! - `upgrade`: the DaemonSet rolled forward and back while a pod holds a NIC;
//! - `kube_api`: the agent's Kubernetes client against the API server;
//! - `dra_slices`: the node's ResourceSlice published;
//! - `multus_dra`: a NIC from a ResourceClaim through Multus' DRA mode.

mod dra_slices;
mod gc;
mod kube_api;
mod multus_dra;
mod pods;
mod quickstart;
mod upgrade;
