//! What the leak collector counts (`rdma_host_device_gc_*`): its own, so the collector needs
//! nothing of the exporter; the exporter registers them (`metrics::encode::render`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// A series' labels: a network or an outcome, never a pod.
pub(crate) type Labels = Vec<(&'static str, String)>;
/// One counter per label set.
pub(crate) type Series = Family<Labels, Counter>;

/// The GC's counters: live as long as the exporter (`crate::metrics`, which registers them
/// under the names of its catalog), shared with the GC thread. Labels are networks (bounded by the node's NADs) and two outcomes, never pods.
#[derive(Debug, Clone)]
pub struct Counters {
    collected: Family<Labels, Counter>,
    failed: Family<Labels, Counter>,
    rounds: Family<Labels, Counter>,
}

impl Default for Counters {
    fn default() -> Self {
        let rounds = Family::<Labels, Counter>::default();
        for o in ["done", "runtime_unavailable"] {
            drop(rounds.get_or_create(&vec![("outcome", o.to_string())]));
        }
        Counters {
            collected: Family::default(),
            failed: Family::default(),
            rounds,
        }
    }
}

impl Counters {
    /// One attachment of `network` given back.
    pub fn collected(&self, network: &str) {
        self.collected
            .get_or_create(&vec![("network", network.to_string())])
            .inc();
    }

    /// One attachment of `network` found leaked but not given back this round.
    pub fn failed(&self, network: &str) {
        self.failed
            .get_or_create(&vec![("network", network.to_string())])
            .inc();
    }

    /// One round ended: `done`, or `runtime_unavailable`.
    pub fn round(&self, outcome: &'static str) {
        self.rounds
            .get_or_create(&vec![("outcome", outcome.to_string())])
            .inc();
    }

    /// The three families (collected, failed, rounds), for the exporter's registry.
    pub(crate) fn families(&self) -> (&Series, &Series, &Series) {
        (&self.collected, &self.failed, &self.rounds)
    }

    /// How many of `network`'s attachments were collected so far (tests).
    pub fn collected_of(&self, network: &str) -> u64 {
        self.collected
            .get_or_create(&vec![("network", network.to_string())])
            .get()
    }
}
