//! The traffic counters `inspect` shows per attached NIC and RDMA device: one scrape of the
//! metrics exporter's own collector (`metrics::collect`, which enters each pod's netns),
//! regrouped per attachment; `--watch` takes a second scrape and divides the difference by the
//! time between them. Nothing here reads the kernel itself.

use super::report::{Counters, Netdev, Rates, Report};
use crate::metrics::collect::{self, Source};
use crate::metrics::snapshot::{self as m, Labels, Metric, Snapshot, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Whose counters: an attachment (pod interface and its RDMA device), or an RDMA device on
/// the host that no attachment holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Attachment {
        container_id: String,
        ifname: String,
    },
    Host(String),
}

/// One scrape, regrouped.
#[derive(Debug, Clone)]
pub struct Sample {
    /// When the scrape started.
    pub at: Instant,
    pub by: BTreeMap<Key, Counters>,
    pub errors: BTreeMap<&'static str, u64>,
}

/// Scrape the attachments in `state_dir` and the host's RDMA devices, as the exporter does.
pub fn sample(state_dir: &Path) -> Sample {
    let src = Source {
        state_dir: state_dir.to_path_buf(),
        sysfs: "/sys".into(),
        timeout: Duration::from_secs(2),
    };
    let at = Instant::now();
    let mut snap = Snapshot::default();
    let errors = collect::scrape(&src, &mut snap);
    Sample {
        at,
        by: from_snapshot(&snap),
        errors: errors.0,
    }
}

fn label<'a>(l: &'a Labels, k: &str) -> &'a str {
    l.iter()
        .find(|(n, _)| *n == k)
        .map_or("", |(_, v)| v.as_str())
}

fn nd(c: &mut Counters) -> &mut Netdev<u64> {
    c.netdev.get_or_insert_default()
}

fn is(metric: &Metric, which: &'static Metric) -> bool {
    std::ptr::eq(metric, which)
}

/// The samples of one scrape, per attachment or host device.
pub fn from_snapshot(snap: &Snapshot) -> BTreeMap<Key, Counters> {
    let mut by: BTreeMap<Key, Counters> = BTreeMap::new();
    for f in &snap.families {
        for (l, v) in &f.samples {
            let (cid, dev) = (label(l, "container_id"), label(l, "rdma_device"));
            let key = if !cid.is_empty() {
                Key::Attachment {
                    container_id: cid.to_owned(),
                    ifname: label(l, "interface").to_owned(),
                }
            } else if !dev.is_empty() {
                Key::Host(dev.to_owned())
            } else {
                continue; // the exporter's own series
            };
            let v = match *v {
                Value::Int(i) => i,
                Value::Float(x) => x as u64,
            };
            let c = by.entry(key).or_default();
            let metric = f.metric;
            if is(metric, &m::RX_BYTES) {
                nd(c).rx_bytes = v;
            } else if is(metric, &m::RX_PACKETS) {
                nd(c).rx_packets = v;
            } else if is(metric, &m::TX_BYTES) {
                nd(c).tx_bytes = v;
            } else if is(metric, &m::TX_PACKETS) {
                nd(c).tx_packets = v;
            } else if is(metric, &m::HW_COUNTER) {
                let port = label(l, "port").parse().unwrap_or(0);
                c.hw_counters
                    .entry(port)
                    .or_default()
                    .insert(label(l, "counter").to_owned(), v);
            } else if is(metric, &m::RESOURCES) && label(l, "resource") == "qp" {
                c.qps = Some(v);
            } else {
                continue;
            }
            if !dev.is_empty() {
                c.rdma_device.get_or_insert_with(|| dev.to_owned());
            }
        }
    }
    by
}

/// How much a counter grew; a counter that went down was reset (a driver reload, a re-created
/// interface), and everything since counts, as in Prometheus' rate().
fn growth(before: u64, after: u64) -> u64 {
    after.checked_sub(before).unwrap_or(after)
}

/// Per-second rates from `before` to `after`, `secs` apart.
pub fn rates(before: &Counters, after: &Counters, secs: f64) -> Rates {
    let per = |b: u64, a: u64| growth(b, a) as f64 / secs;
    let netdev = match (&before.netdev, &after.netdev) {
        (Some(b), Some(a)) => Some(Netdev {
            rx_bytes: per(b.rx_bytes, a.rx_bytes),
            rx_packets: per(b.rx_packets, a.rx_packets),
            tx_bytes: per(b.tx_bytes, a.tx_bytes),
            tx_packets: per(b.tx_packets, a.tx_packets),
        }),
        _ => None,
    };
    let mut hw: BTreeMap<u32, BTreeMap<String, f64>> = BTreeMap::new();
    for (port, counters) in &after.hw_counters {
        for (name, a) in counters {
            if let Some(b) = before.hw_counters.get(port).and_then(|c| c.get(name)) {
                hw.entry(*port)
                    .or_default()
                    .insert(name.clone(), per(*b, *a));
            }
        }
    }
    Rates {
        interval_seconds: secs,
        netdev,
        hw_counters: hw,
    }
}

/// The key a report row's counters are found under.
fn key_of(n: &super::NicRow) -> Option<Key> {
    match (&n.attachment, &n.rdma) {
        (Some(a), _) => Some(Key::Attachment {
            container_id: a.container_id.clone(),
            ifname: a.ifname.clone(),
        }),
        (None, Some(r)) => Some(Key::Host(r.device.clone())),
        (None, None) => None,
    }
}

/// Put `first`'s counters into the report's rows; with `second` (`--watch`), its totals and
/// the rates between the two.
pub fn fill(report: &mut Report, first: &Sample, second: Option<&Sample>) {
    for n in &mut report.nics {
        let Some(key) = key_of(n) else { continue };
        let Some(c1) = first.by.get(&key) else {
            continue;
        };
        n.counters = Some(match second.and_then(|s| s.by.get(&key).map(|c| (s, c))) {
            Some((s, c2)) => {
                let secs = s.at.saturating_duration_since(first.at).as_secs_f64();
                let mut c = c2.clone();
                if secs > 0.0 {
                    c.rates = Some(rates(c1, c2, secs));
                }
                c
            }
            None => c1.clone(),
        });
    }
    let last = second.unwrap_or(first);
    report.counter_errors = last
        .errors
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| (*k, *n))
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(cid: &str, dev: &str) -> Labels {
        vec![
            ("namespace", "ns".into()),
            ("container_id", cid.into()),
            ("interface", "net1".into()),
            ("rdma_device", dev.into()),
        ]
    }

    #[test]
    fn a_scrape_regroups_per_attachment_and_host_device() {
        let mut s = Snapshot::default();
        let pod = labels("c1", "rxe0");
        s.int(&m::TX_BYTES, pod.clone(), 1000);
        s.int(&m::RX_PACKETS, pod.clone(), 7);
        let mut hw = pod.clone();
        hw.push(("port", "1".into()));
        hw.push(("counter", "sent_pkts".into()));
        s.int(&m::HW_COUNTER, hw, 12);
        let mut qp = pod.clone();
        qp.push(("resource", "qp".into()));
        s.put(&m::RESOURCES, qp, Value::Float(2.0));
        let mut cq = labels("", "mlx5_0");
        cq.push(("resource", "cq".into()));
        s.put(&m::RESOURCES, cq, Value::Float(5.0));
        let mut qp = labels("", "mlx5_0");
        qp.push(("resource", "qp".into()));
        s.put(&m::RESOURCES, qp, Value::Float(3.0));
        s.put(&m::ATTACHMENTS, vec![], Value::Float(1.0));
        let by = from_snapshot(&s);
        assert_eq!(by.len(), 2, "{by:?}");
        let c = &by[&Key::Attachment {
            container_id: "c1".into(),
            ifname: "net1".into(),
        }];
        assert_eq!(c.netdev.unwrap().tx_bytes, 1000);
        assert_eq!(c.netdev.unwrap().rx_packets, 7);
        assert_eq!(c.qps, Some(2));
        assert_eq!(c.hw_counters[&1]["sent_pkts"], 12);
        assert_eq!(c.rdma_device.as_deref(), Some("rxe0"));
        let h = &by[&Key::Host("mlx5_0".into())];
        assert_eq!((h.netdev, h.qps), (None, Some(3)));
    }

    #[test]
    fn rates_are_per_second_and_survive_a_reset() {
        let mut a = Counters {
            netdev: Some(Netdev {
                rx_bytes: 100,
                rx_packets: 1,
                tx_bytes: 1_000,
                tx_packets: 10,
            }),
            ..Default::default()
        };
        a.hw_counters
            .entry(1)
            .or_default()
            .insert("sent_pkts".into(), 50);
        let mut b = a.clone();
        b.netdev = Some(Netdev {
            rx_bytes: 100,
            rx_packets: 1,
            tx_bytes: 5_000,
            tx_packets: 30,
        });
        b.hw_counters
            .get_mut(&1)
            .unwrap()
            .insert("sent_pkts".into(), 10); // reset
        b.hw_counters
            .get_mut(&1)
            .unwrap()
            .insert("rcvd_pkts".into(), 4); // new: no rate
        let r = rates(&a, &b, 2.0);
        let nd = r.netdev.unwrap();
        assert_eq!(
            (nd.tx_bytes, nd.tx_packets, nd.rx_bytes),
            (2_000.0, 10.0, 0.0)
        );
        assert_eq!(r.hw_counters[&1]["sent_pkts"], 5.0);
        assert!(!r.hw_counters[&1].contains_key("rcvd_pkts"));
    }
}
