//! One scrape's worth of samples, grouped by metric family, and the table of every family the
//! exporter can emit (name, help, type): the one place a metric's name and meaning live.
//! Collection fills a [`Snapshot`]; `encode.rs` hands it to prometheus-client.

/// Labels of one sample, in a fixed order.
pub(crate) type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Exposed with `_total` appended by the encoder.
    Counter,
    Gauge,
}

/// A metric family: its name without the `_total` of a counter.
#[derive(Debug)]
pub struct Metric {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
}

const fn counter(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        help,
        kind: Kind::Counter,
    }
}

const fn gauge(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        help,
        kind: Kind::Gauge,
    }
}

pub static ATTACHMENT_INFO: Metric = gauge(
    "rdma_host_device_attachment_info",
    "One per attachment in the state directory (always 1): the pod, its interface, the host NIC and RDMA device it holds, and the pod's netns path",
);
pub static ATTACHMENT_UP: Metric = gauge(
    "rdma_host_device_attachment_up",
    "1 if the pod's netns could be entered and its interface read in this scrape, else 0 (netns gone: pod deleted without DEL)",
);
pub static ATTACHMENTS: Metric = gauge(
    "rdma_host_device_attachments",
    "Attachments (state records) in the state directory",
);
pub static SCRAPE_DURATION: Metric = gauge(
    "rdma_host_device_scrape_duration_seconds",
    "How long collecting this scrape took",
);

pub static RX_BYTES: Metric = counter(
    "rdma_host_device_netdev_receive_bytes",
    "Bytes received by the pod's interface (IFLA_STATS64 rx_bytes, read inside the pod's netns)",
);
pub static TX_BYTES: Metric = counter(
    "rdma_host_device_netdev_transmit_bytes",
    "Bytes sent by the pod's interface (IFLA_STATS64 tx_bytes)",
);
pub static RX_PACKETS: Metric = counter(
    "rdma_host_device_netdev_receive_packets",
    "Packets received by the pod's interface",
);
pub static TX_PACKETS: Metric = counter(
    "rdma_host_device_netdev_transmit_packets",
    "Packets sent by the pod's interface",
);
pub static RX_ERRORS: Metric = counter(
    "rdma_host_device_netdev_receive_errors",
    "Receive errors on the pod's interface",
);
pub static TX_ERRORS: Metric = counter(
    "rdma_host_device_netdev_transmit_errors",
    "Transmit errors on the pod's interface",
);
pub static RX_DROPPED: Metric = counter(
    "rdma_host_device_netdev_receive_dropped",
    "Received packets dropped on the pod's interface",
);
pub static TX_DROPPED: Metric = counter(
    "rdma_host_device_netdev_transmit_dropped",
    "Transmitted packets dropped on the pod's interface",
);
pub static NETDEV_UP: Metric = gauge(
    "rdma_host_device_netdev_up",
    "1 if the pod's interface is operationally up",
);
pub static NETDEV_MTU: Metric = gauge(
    "rdma_host_device_netdev_mtu_bytes",
    "MTU of the pod's interface",
);

pub static PORT_STATE: Metric = gauge(
    "rdma_host_device_rdma_port_state",
    "IB port state from RDMA netlink: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER",
);
pub static HW_COUNTER: Metric = counter(
    "rdma_host_device_rdma_hw_counter",
    "A port's driver hardware counter (RDMA netlink statistics, what /sys/class/infiniband/DEV/ports/N/hw_counters holds), by the driver's name in label counter",
);
pub static PORT_COUNTER: Metric = counter(
    "rdma_host_device_rdma_port_counter",
    "A port's standard IB counter (/sys/class/infiniband/DEV/ports/N/counters, read in the device's own netns), by name in label counter; port_xmit_data and port_rcv_data count 4-byte words",
);
pub static RESOURCES: Metric = gauge(
    "rdma_host_device_rdma_resources",
    "RDMA resources the device holds now, by kind in label resource (qp, cq, mr, pd, cm_id, ctx, srq: RDMA netlink resource tracking)",
);
pub static QPS: Metric = gauge(
    "rdma_host_device_rdma_qps",
    "QPs of the device by owner: a process (owner_pid, owner = its comm) or a kernel module (owner_pid empty)",
);

pub static FOREIGN_UPPERS_REMOVED: Metric = counter(
    "rdma_host_device_foreign_uppers_removed",
    "Links of another network namespace the uppers watcher found riding a NIC a pod holds and deleted (a neighbour with NET_ADMIN receiving that pod's frames); its log names each",
);

pub(crate) static SCRAPE_ERRORS: Metric = counter(
    "rdma_host_device_scrape_errors",
    "Failures while collecting, by stage; the scrape still answers with everything else",
);

pub(crate) static GC_COLLECTED: Metric = counter(
    "rdma_host_device_gc_collected",
    "Attachments the agent's GC gave back (IPAM released, NIC home, record gone) because the runtime no longer lists their pod sandbox, by network",
);
pub(crate) static GC_FAILED: Metric = counter(
    "rdma_host_device_gc_failed",
    "Attachments the agent's GC found leaked but could not give back in a round (it tries again next round; its log says why), by network",
);
pub(crate) static GC_ROUNDS: Metric = counter(
    "rdma_host_device_gc_rounds",
    "The agent's GC rounds, by outcome: done, or runtime_unavailable (the runtime could not be asked which sandboxes exist: nothing was collected)",
);

/// Every stage a scrape error is counted under (each exported from the start, at 0).
pub(crate) const STAGES: [&str; 10] = [
    "state_dir",
    "netns",
    "netdev",
    "rdma",
    "hw_counters",
    "port_counters",
    "resources",
    "qps",
    "host_rdma",
    "panic",
];

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

#[derive(Debug)]
pub struct Family {
    pub metric: &'static Metric,
    pub samples: Vec<(Labels, Value)>,
}

/// The samples of one scrape, families in first-use order.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub families: Vec<Family>,
}

impl Snapshot {
    pub fn put(&mut self, metric: &'static Metric, labels: Labels, value: Value) {
        let i = match self
            .families
            .iter()
            .position(|f| std::ptr::eq(f.metric, metric))
        {
            Some(i) => i,
            None => {
                self.families.push(Family {
                    metric,
                    samples: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        self.families[i].samples.push((labels, value));
    }

    pub fn int(&mut self, metric: &'static Metric, labels: Labels, v: u64) {
        self.put(metric, labels, Value::Int(v));
    }

    /// The samples of `name` (for tests).
    #[cfg(test)]
    pub(crate) fn samples(&self, name: &str) -> Vec<&(Labels, Value)> {
        self.families
            .iter()
            .filter(|f| f.metric.name == name)
            .flat_map(|f| f.samples.iter())
            .collect()
    }
}

/// `labels` plus one more.
pub fn with(labels: &Labels, k: &'static str, v: impl Into<String>) -> Labels {
    let mut l = labels.clone();
    l.push((k, v.into()));
    l
}
