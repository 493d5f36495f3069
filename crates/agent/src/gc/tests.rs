//! Which attachments a round takes, and that a runtime that cannot be asked makes it take none.

use super::*;
use std::os::unix::net::UnixListener;

fn record(cid: &str) -> Record {
    Record {
        container_id: cid.into(),
        ifname: "net1".into(),
        network: "rail".into(),
        host_name: "ens1f0".into(),
        pod: Some(rdma_host_device_core::names::PodRef {
            namespace: "team-a".into(),
            name: cid.into(),
            uid: String::new(),
        }),
        ..Record::default()
    }
}

fn at(secs_ago: u64, now: SystemTime) -> SystemTime {
    now - Duration::from_secs(secs_ago)
}

#[test]
fn only_records_without_a_sandbox_and_older_than_the_grace_are_leaked() {
    let now = SystemTime::now();
    let grace = Duration::from_secs(120);
    let records = vec![
        // listed: a live pod, however old
        Written {
            record: record("live"),
            at: at(86_400, now),
        },
        // not listed, old: leaked
        Written {
            record: record("gone"),
            at: at(121, now),
        },
        // exactly the grace: leaked
        Written {
            record: record("edge"),
            at: at(120, now),
        },
        // not listed, young: an ADD in flight (containerd lists the sandbox after ADD)
        Written {
            record: record("adding"),
            at: at(119, now),
        },
        // written after the question (a clock stepped back, or an ADD that just finished)
        Written {
            record: record("future"),
            at: now + Duration::from_secs(30),
        },
        // no Kubernetes pod: another runtime's attachment (podman's), whatever the CRI lists
        Written {
            record: Record {
                pod: None,
                ..record("podman")
            },
            at: at(86_400, now),
        },
    ];
    let listed: HashSet<String> = ["live".to_string()].into();
    let got: Vec<&str> = leaked(&records, &listed, now, grace)
        .iter()
        .map(|r| r.container_id.as_str())
        .collect();
    assert_eq!(got, ["gone", "edge"]);
    // The runtime lists every sandbox: nothing is leaked.
    let all: HashSet<String> = records
        .iter()
        .map(|w| w.record.container_id.clone())
        .collect();
    assert!(leaked(&records, &all, now, grace).is_empty());
}

/// A state dir holding one attachment whose record is a day old and whose sandbox no runtime
/// could list: what a round would collect if the runtime answered.
fn stale_store() -> (tempdir::Dir, Node) {
    let d = tempdir::Dir::new();
    let store = Store::new(d.path());
    store.save(&record("gone")).unwrap();
    let f = std::fs::File::options()
        .write(true)
        .open(d.path().join("gone:net1.json"))
        .unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(86_400))
        .unwrap();
    let node = Node {
        state_dir: d.path().to_path_buf(),
        ..Node::default()
    };
    (d, node)
}

fn config(socket: std::path::PathBuf) -> GcConfig {
    GcConfig {
        cri_socket: socket,
        period_seconds: 300,
        grace_seconds: 120,
        timeout_seconds: 1,
        cni_path: vec!["/opt/cni/bin".into()],
    }
}

#[test]
fn a_runtime_that_cannot_be_asked_collects_nothing() {
    let (d, node) = stale_store();
    let counters = Counters::default();
    // No socket at all.
    let none = config(d.path().join("no-such.sock"));
    assert_eq!(round(&none, &node, &counters), Round::RuntimeUnavailable);
    // A socket that accepts and never answers: the deadline ends the round.
    let mute = d.path().join("mute.sock");
    let _listener = UnixListener::bind(&mute).unwrap();
    let t = std::time::Instant::now();
    assert_eq!(
        round(&config(mute), &node, &counters),
        Round::RuntimeUnavailable
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // Something that is not a CRI runtime (closes at once).
    let closing = d.path().join("closing.sock");
    let l = UnixListener::bind(&closing).unwrap();
    let closer = std::thread::spawn(move || {
        for s in l.incoming().take(1) {
            drop(s);
        }
    });
    assert_eq!(
        round(&config(closing), &node, &counters),
        Round::RuntimeUnavailable
    );
    closer.join().unwrap();
    // The record is still there; nothing was counted collected.
    assert!(
        Store::new(&node.state_dir)
            .load("gone", "net1")
            .unwrap()
            .is_some()
    );
    assert_eq!(counters.collected_of("rail"), 0);
}

/// A scratch directory removed on drop.
mod tempdir {
    pub(crate) struct Dir(std::path::PathBuf);

    impl Dir {
        pub(crate) fn new() -> Self {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "rhd-gc-{}-{}",
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }

        pub(crate) fn path(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
