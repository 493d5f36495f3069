//! Runtimes: the plugin under a real containerd CRI driven as the kubelet drives it (`cri`),
//! and the DaemonSet's image built offline and run as conf/k8s/daemonset.yaml runs it
//! (`image`).

mod cri;
mod image;
