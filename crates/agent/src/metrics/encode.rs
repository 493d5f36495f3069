//! The exposition: a [`Snapshot`] handed to the official `prometheus-client` crate as a
//! `Collector`, encoded in the OpenMetrics text format with the long-lived scrape error
//! counters. Nothing here writes the format by hand.

use super::snapshot::{
    GC_COLLECTED, GC_FAILED, GC_ROUNDS, Kind, Labels, SCRAPE_ERRORS, STAGES, Snapshot, Value,
};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// What `/metrics` answers with.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `rdma_host_device_scrape_errors_total{stage}`: lives as long as the exporter.
#[derive(Debug, Clone)]
pub struct ScrapeErrors(Family<Labels, Counter>);

impl Default for ScrapeErrors {
    fn default() -> Self {
        let f = Family::<Labels, Counter>::default();
        for s in STAGES {
            // Every stage from the first scrape on, at 0: rate() needs the series to exist.
            drop(f.get_or_create(&vec![("stage", s.to_string())]));
        }
        ScrapeErrors(f)
    }
}

impl ScrapeErrors {
    pub fn add(&self, stage: &'static str, n: u64) {
        self.0
            .get_or_create(&vec![("stage", stage.to_string())])
            .inc_by(n);
    }
}

#[derive(Debug)]
struct SnapshotCollector(Snapshot);

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.0.families {
            let ty = match f.metric.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
            };
            let mut family = encoder.encode_descriptor(f.metric.name, f.metric.help, None, ty)?;
            if let [(labels, v)] = f.samples.as_slice()
                && labels.is_empty()
            {
                // An unlabelled metric: no `{}` after its name.
                encode_value(family, f.metric.kind, *v)?;
                continue;
            }
            for (labels, v) in &f.samples {
                encode_value(family.encode_family(&Escaped(labels))?, f.metric.kind, *v)?;
            }
        }
        Ok(())
    }
}

/// A label set whose values are escaped as OpenMetrics requires (`\\`, `\"`, `\n`):
/// prometheus-client 0.24 writes label values as given, and some of ours come from outside
/// (a process's comm, a netns path), so one odd value must not break the whole exposition.
struct Escaped<'a>(&'a Labels);

impl EncodeLabelSet for Escaped<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        for (k, v) in self.0 {
            let mut label = encoder.encode_label();
            let mut key = label.encode_label_key()?;
            key.write_str(k)?;
            let mut value = key.encode_label_value()?;
            for c in v.chars() {
                match c {
                    '\\' => value.write_str("\\\\")?,
                    '"' => value.write_str("\\\"")?,
                    '\n' => value.write_str("\\n")?,
                    c => value.write_char(c)?,
                }
            }
            value.finish()?;
        }
        Ok(())
    }
}

fn encode_value(e: MetricEncoder, kind: Kind, v: Value) -> Result<(), std::fmt::Error> {
    match (kind, v) {
        (Kind::Counter, Value::Int(n)) => ConstCounter::new(n).encode(e),
        (Kind::Counter, Value::Float(x)) => ConstCounter::new(x).encode(e),
        (Kind::Gauge, Value::Int(n)) => ConstGauge::new(n as f64).encode(e),
        (Kind::Gauge, Value::Float(x)) => ConstGauge::new(x).encode(e),
    }
}

/// The text of one scrape.
pub fn render(
    snap: Snapshot,
    errors: &ScrapeErrors,
    gc: &crate::gc::Counters,
) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(snap)));
    registry.register(SCRAPE_ERRORS.name, SCRAPE_ERRORS.help, errors.0.clone());
    let (collected, failed, rounds) = gc.families();
    registry.register(GC_COLLECTED.name, GC_COLLECTED.help, collected.clone());
    registry.register(GC_FAILED.name, GC_FAILED.help, failed.clone());
    registry.register(GC_ROUNDS.name, GC_ROUNDS.help, rounds.clone());
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::snapshot as m;

    #[test]
    fn counters_get_total_and_labels_are_escaped() {
        let mut s = Snapshot::default();
        let l: Labels = vec![("namespace", "team-a".into()), ("pod", "we\"ird\n".into())];
        s.int(&m::RX_BYTES, l.clone(), 42);
        s.int(
            &m::RX_BYTES,
            vec![("namespace", "b".into()), ("pod", "p".into())],
            7,
        );
        s.put(&m::NETDEV_UP, l, Value::Float(1.0));
        let errors = ScrapeErrors::default();
        errors.add("netns", 2);
        let text = render(s, &errors, &crate::gc::Counters::default()).unwrap();
        assert!(
            text.contains("# TYPE rdma_host_device_netdev_receive_bytes counter"),
            "{text}"
        );
        assert!(
            text.contains(r#"rdma_host_device_netdev_receive_bytes_total{namespace="team-a",pod="we\"ird\n"} 42"#),
            "{text}"
        );
        assert!(
            text.contains(r#"rdma_host_device_netdev_up{namespace="team-a""#),
            "{text}"
        );
        assert!(
            text.contains(r#"rdma_host_device_scrape_errors_total{stage="netns"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"rdma_host_device_scrape_errors_total{stage="panic"} 0"#),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
