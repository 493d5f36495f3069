//! The agent's Kubernetes client (`rdma_host_device_agent::kube`) against the real kube-apiserver 1.37
//! of the test cluster (tests/cluster/cluster.sh: HTTPS with its own CA, the admin's bearer
//! token): every call the DRA driver makes, and the answers the API server gives when things
//! go wrong (401, 404, 409). Claims are seeded through the same REST calls the scheduler makes
//! (create, then PUT the allocation on /status), reserved for a real pod (the controller-manager
//! removes a reservation for a pod that does not exist). The store is the cluster's, shared by
//! the binary's tests: each test names its nodes and slices its own. Needs root (the cluster).

use test_support as common;
use test_support::apiserver as standin;

use common::TempDir;
use futures::StreamExt;
use rdma_host_device_agent::kube::{
    self as k, Endpoint, Kube, ResourceClaim, ResourceSlice, SliceEvent, SliceFilter,
};
use serde_json::json;
use standin::ApiServer;
use std::process::Command;
use std::time::Duration;

fn rt() -> tokio::runtime::Runtime {
    rdma_host_device_agent::async_rt::current_thread().unwrap()
}

fn slice(name: &str, node: &str, driver: &str, device: &str) -> ResourceSlice {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver, "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": device, "attributes": {"rdma-host-device.io/linkUp": {"bool": true}}}]
        }
    }))
    .unwrap()
}

/// A CA of our own that signed nothing the cluster serves.
fn another_ca(dir: &std::path::Path) -> std::path::PathBuf {
    let (key, crt) = (dir.join("other-ca.key"), dir.join("other-ca.crt"));
    let st = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=not-the-cluster-ca", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl");
    assert!(st.success(), "openssl req -x509");
    crt
}

fn filter(node: &str) -> SliceFilter {
    SliceFilter {
        driver: "rdma-host-device.io".into(),
        node: node.into(),
    }
}

#[test]
fn slices_are_created_listed_by_driver_and_node_updated_and_deleted() {
    let api = ApiServer::real();
    rt().block_on(async {
        let kube = Kube::connect(&api.endpoint()).await.unwrap();
        let a = kube
            .create_slice(&slice("crud-n1-a", "crud-n1", "rdma-host-device.io", "d0"))
            .await
            .unwrap();
        kube.create_slice(&slice("crud-n2-a", "crud-n2", "rdma-host-device.io", "d0"))
            .await
            .unwrap();
        kube.create_slice(&slice("crud-n1-gpu", "crud-n1", "gpu.example.com", "g0"))
            .await
            .unwrap();

        let e = kube
            .create_slice(&slice("crud-n1-a", "crud-n1", "rdma-host-device.io", "d0"))
            .await
            .unwrap_err();
        assert!(e.is_already_exists(), "{e}");

        let (mine, rv) = kube.list_slices(&filter("crud-n1")).await.unwrap();
        let names: Vec<_> = mine
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["crud-n1-a"], "only our driver's, only this node's");
        assert!(!rv.is_empty());

        // An update with the current resourceVersion lands; one with a stale one is refused.
        let mut b = a.clone();
        b.spec.devices.as_mut().unwrap()[0].name = "d1".into();
        let b = kube.update_slice(&b).await.unwrap();
        assert_eq!(
            b.metadata.generation,
            Some(2),
            "a spec change moves generation"
        );
        let mut stale = a.clone();
        stale.spec.devices.as_mut().unwrap()[0].name = "d2".into();
        let e = kube.update_slice(&stale).await.unwrap_err();
        assert!(e.is_conflict() && e.reason == "Conflict", "{e}");

        // Delete with a uid precondition that no longer holds is refused; then it goes.
        let e = kube
            .delete_slice("crud-n1-a", Some("not-the-uid"))
            .await
            .unwrap_err();
        assert!(e.is_conflict(), "{e}");
        kube.delete_slice("crud-n1-a", b.metadata.uid.as_deref())
            .await
            .unwrap();
        kube.delete_slice("crud-n1-a", None)
            .await
            .expect("deleting what is gone is fine");
        assert!(
            kube.list_slices(&filter("crud-n1"))
                .await
                .unwrap()
                .0
                .is_empty()
        );
    });
}

#[test]
fn a_watch_sees_our_slices_change_and_nothing_else() {
    let api = ApiServer::real();
    rt().block_on(async {
        let kube = Kube::connect(&api.endpoint()).await.unwrap();
        let (_, rv) = kube.list_slices(&filter("watch-n1")).await.unwrap();
        let mut events = kube
            .watch_slices(&filter("watch-n1"), &rv, 10)
            .await
            .unwrap();
        let s = kube
            .create_slice(&slice(
                "watch-n1-a",
                "watch-n1",
                "rdma-host-device.io",
                "d0",
            ))
            .await
            .unwrap();
        kube.create_slice(&slice(
            "watch-n2-a",
            "watch-n2",
            "rdma-host-device.io",
            "d0",
        ))
        .await
        .unwrap();
        let mut s2 = s.clone();
        s2.spec.devices.as_mut().unwrap()[0].name = "d1".into();
        kube.update_slice(&s2).await.unwrap();
        kube.delete_slice("watch-n1-a", None).await.unwrap();
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .expect("an event within 10 s")
                .expect("the stream goes on")
                .unwrap();
            seen.push(match ev {
                SliceEvent::Added(s) => format!("ADDED {}", s.metadata.name.unwrap()),
                SliceEvent::Modified(s) => format!(
                    "MODIFIED {} {}",
                    s.metadata.name.unwrap(),
                    s.spec.devices.unwrap()[0].name
                ),
                SliceEvent::Deleted(s) => format!("DELETED {}", s.metadata.name.unwrap()),
                SliceEvent::Bookmark(_) => continue,
            });
        }
        assert_eq!(
            seen,
            [
                "ADDED watch-n1-a",
                "MODIFIED watch-n1-a d1",
                "DELETED watch-n1-a"
            ]
        );
    });
}

#[test]
fn a_claim_seeded_like_the_scheduler_does_reads_back_its_allocation_and_pods() {
    let api = ApiServer::real();
    api.call(
        "POST",
        "/api/v1/namespaces",
        Some(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})),
    );
    // The namespace's default ServiceAccount comes from the controller-manager, a moment later.
    let t = std::time::Instant::now();
    while !api
        .try_call(
            "GET",
            "/api/v1/namespaces/team-a/serviceaccounts/default",
            None,
        )
        .0
    {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no default ServiceAccount in team-a"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The consumer: a pod no node can take (it stays Pending, so the controller-manager keeps
    // the reservation), with the UID the API server gives it.
    let trainer = api.call(
        "POST",
        "/api/v1/namespaces/team-a/pods",
        Some(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "trainer", "namespace": "team-a"},
            "spec": {
                "nodeSelector": {"rdma-host-device.io/test": "no-such-node"},
                "containers": [{"name": "c", "image": "pause", "imagePullPolicy": "Never"}]
            }
        })),
    );
    let trainer_uid = trainer["metadata"]["uid"]
        .as_str()
        .expect("the pod's uid")
        .to_owned();
    rt().block_on(async {
        let kube = Kube::connect(&api.endpoint()).await.unwrap();
        let claim: ResourceClaim = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "nic", "namespace": "team-a"},
            "spec": {"devices": {"requests": [{"name": "rail", "exactly": {"deviceClassName": "rdma-host-device.io"}}]}},
        }))
        .unwrap();
        // What the scheduler does: create (by the user), then write the allocation on /status.
        let mut c: ResourceClaim = serde_json::from_value(api.call(
            "POST",
            "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims",
            Some(&serde_json::to_value(&claim).unwrap()),
        ))
        .expect("create the claim");
        assert!(
            k::allocated_devices(&c).is_empty(),
            "not allocated yet: {c:?}"
        );
        c.status = Some(
            serde_json::from_value(json!({
                "allocation": {"devices": {"results": [
                    {"request": "rail", "driver": "rdma-host-device.io", "pool": "n1", "device": "pci-0000-3b-00-0"}
                ]}},
                "reservedFor": [{"resource": "pods", "name": "trainer", "uid": trainer_uid}]
            }))
            .unwrap(),
        );
        let c = kube.update_claim_status(&c).await.expect("PUT /status");

        let got = kube.get_claim("team-a", "nic").await.unwrap();
        assert_eq!(got.metadata.resource_version, c.metadata.resource_version);
        let devs = k::allocated_devices(&got);
        assert_eq!(devs.len(), 1);
        assert_eq!(
            (
                devs[0].request.as_str(),
                devs[0].driver.as_str(),
                devs[0].pool.as_str(),
                devs[0].device.as_str()
            ),
            ("rail", "rdma-host-device.io", "n1", "pci-0000-3b-00-0")
        );
        assert_eq!(k::reserved_pod_uids(&got), [trainer_uid.as_str()]);

        // A status write on a stale copy is a conflict (the KEP-4817 writer retries on it).
        let e = kube.update_claim_status(&claim_with_rv(&got, "1")).await.unwrap_err();
        assert!(e.is_conflict(), "{e}");

        let e = kube.get_claim("team-a", "other").await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let e = kube.get_claim("team-b", "nic").await.unwrap_err();
        assert!(e.is_not_found(), "another namespace's name does not reach it: {e}");
    });
}

fn claim_with_rv(c: &ResourceClaim, rv: &str) -> ResourceClaim {
    let mut c = c.clone();
    c.metadata.resource_version = Some(rv.into());
    c
}

#[test]
fn a_wrong_token_is_a_401_that_names_the_token_file() {
    let dir = TempDir::new("kube-api");
    let api = ApiServer::real();
    let wrong = dir.path().join("wrong-token");
    std::fs::write(&wrong, "not-the-token").unwrap();
    rt().block_on(async {
        let kube = Kube::connect(&Endpoint::Explicit {
            server: api.url.clone(),
            ca: api.ca.clone(),
            token: wrong.clone(),
        })
        .await
        .unwrap();
        let e = kube.list_slices(&filter("n1")).await.unwrap_err();
        assert_eq!(e.code, Some(401), "{e}");
        let text = rdma_host_device_agent::error::Error::from(e).to_string();
        assert!(text.contains("401 Unauthorized"), "{text}");
        assert!(text.contains(&wrong.display().to_string()), "{text}");
    });
}

#[test]
fn a_server_whose_certificate_the_ca_did_not_sign_is_refused() {
    let dir = TempDir::new("kube-api");
    let api = ApiServer::real();
    let other = another_ca(dir.path());
    rt().block_on(async {
        let kube = Kube::connect(&Endpoint::Explicit {
            server: api.url.clone(),
            ca: other.clone(),
            token: api.token.clone(),
        })
        .await
        .unwrap();
        let e = kube.list_slices(&filter("tls-refused")).await.unwrap_err();
        assert_eq!(e.code, None, "no answer from a server we cannot trust: {e}");
        // The same list with the cluster's CA is answered and seen in the audit log, so its
        // absence above means the request (and the token) never reached the server.
        let kube = Kube::connect(&api.endpoint()).await.unwrap();
        kube.list_slices(&filter("tls-trusted")).await.unwrap();
        let seen = api.requests();
        assert!(seen.contains("tls-trusted"), "the audit log works: {seen}");
        assert!(
            !seen.contains("tls-refused"),
            "it never reached the server: {seen}"
        );
    });
}

#[test]
fn plain_http_is_refused_before_any_token_is_sent() {
    let api = ApiServer::real();
    rt().block_on(async {
        let e = Kube::connect(&Endpoint::Explicit {
            server: api.url.replace("https://", "http://"),
            ca: api.ca.clone(),
            token: api.token.clone(),
        })
        .await
        .unwrap_err();
        assert!(e.message.contains("only https"), "{e}");
    });
}

#[test]
fn a_token_file_with_a_trailing_newline_is_refused_at_start_with_the_fix() {
    let dir = TempDir::new("kube-api");
    let api = ApiServer::real();
    let token = dir.path().join("token-nl");
    let t = std::fs::read_to_string(&api.token).unwrap();
    std::fs::write(&token, format!("{t}\n")).unwrap();
    rt().block_on(async {
        let e = Kube::connect(&Endpoint::Explicit {
            server: api.url.clone(),
            ca: api.ca.clone(),
            token: token.clone(),
        })
        .await
        .unwrap_err();
        assert!(e.message.contains("trailing newline"), "{e}");
        assert!(e.message.contains(&token.display().to_string()), "{e}");
    });
}

#[test]
fn a_server_the_ca_file_did_not_sign_is_an_error_naming_that_file() {
    let dir = TempDir::new("kube-api");
    let api = ApiServer::real();
    let other = another_ca(dir.path());
    rt().block_on(async {
        let kube = Kube::connect(&Endpoint::Explicit {
            server: api.url.clone(),
            ca: other.clone(),
            token: api.token.clone(),
        })
        .await
        .unwrap();
        let e = kube.list_slices(&filter("tls-named")).await.unwrap_err();
        let text = rdma_host_device_agent::error::Error::from(e).to_string();
        assert!(text.contains("TLS"), "{text}");
        assert!(text.contains(&other.display().to_string()), "{text}");
    });
}

/// A real API server answers 410 only once etcd is compacted (every 5 minutes): the stand-in
/// keeps the last `--history` events and does what the real one does past them.
#[test]
fn a_watch_from_a_resource_version_the_server_no_longer_has_ends_in_410_expired() {
    let dir = TempDir::new("kube-api");
    let api = ApiServer::start(dir.path(), &["--history", "1"]);
    rt().block_on(async {
        let kube = Kube::connect(&api.endpoint()).await.unwrap();
        let (_, rv) = kube.list_slices(&filter("expired-n1")).await.unwrap();
        for name in ["expired-n1-a", "expired-n1-b", "expired-n1-c"] {
            kube.create_slice(&slice(name, "expired-n1", "rdma-host-device.io", "d0"))
                .await
                .unwrap();
        }
        // Either at once or as an ERROR event: one error, with what tells the caller to list
        // again, and the stream ends there.
        let (e, mut rest) = match kube.watch_slices(&filter("expired-n1"), &rv, 10).await {
            Err(e) => (e, None),
            Ok(mut events) => {
                let e = tokio::time::timeout(Duration::from_secs(10), events.next())
                    .await
                    .expect("an answer within 10 s")
                    .expect("an item")
                    .expect_err("an error, not an event");
                (e, Some(events))
            }
        };
        assert_eq!((e.code, e.reason.as_str()), (Some(410), "Expired"), "{e}");
        if let Some(events) = rest.as_mut() {
            assert!(events.next().await.is_none(), "the error is the last item");
        }
    });
}
