//! Which link is the attachment's NIC, and how a lost one is restored: decided from the state
//! record and what the kernel says of each link, never from what a pod can write (name, alias,
//! MAC). Plain data in, no netlink, no root.

use super::*;

mod lost;
use rdma_host_device_core::state::owner_key;
use serde_json::json;

const OWNER_CID: &str = "pod-a";
const IFNAME: &str = "net1";
/// A NIC's PCI function, as the record keeps it and as the kernel names it.
const PCI: &str = "pci/0000:3b:00.1";
const MAC: &str = "0a:58:0a:00:00:01";

fn owner() -> String {
    owner_key(OWNER_CID, IFNAME)
}

/// A link as the kernel reports it: only index, name, MAC, kind and parent vary here.
fn link(index: u32, name: &str, mac: &str) -> LinkInfo {
    LinkInfo {
        index,
        name: name.to_owned(),
        mac: mac.to_owned(),
        ..LinkInfo::default()
    }
}

/// The hardware NIC at [`PCI`], under `name` with `mac`.
fn hardware(index: u32, name: &str, mac: &str) -> LinkInfo {
    LinkInfo {
        parent: Some(("0000:3b:00.1".to_owned(), "pci".to_owned())),
        ..link(index, name, mac)
    }
}

fn veth(index: u32, name: &str, mac: &str) -> LinkInfo {
    LinkInfo {
        kind: Some("veth".to_owned()),
        ..link(index, name, mac)
    }
}

/// `l` with the alias tag of attachment `owner` (any link's alias is the pod's to write).
fn tagged(l: LinkInfo, owner: &str) -> LinkInfo {
    let tag = Tag {
        host_name: "ens1f1".to_owned(),
        host_mtu: 1500,
        host_up: true,
        owner: owner.to_owned(),
    };
    LinkInfo {
        alias: Some(tag.encode()),
        ..l
    }
}

/// A record as ADD writes it for NIC `ens1f1` (host index 7), with `extra` fields (camelCase,
/// as in the state file) on top.
fn record(extra: serde_json::Value) -> Record {
    let mut r = json!({
        "containerId": OWNER_CID,
        "ifname": IFNAME,
        "network": "rail",
        "netns": "/run/netns/pod-a",
        "hostName": "ens1f1",
        "hostMtu": 1500,
        "hostUp": true,
        "mac": MAC,
        "hostIndex": 7,
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        r[k] = v;
    }
    serde_json::from_value(r).expect("a record as ADD writes it")
}

fn hardware_record() -> Record {
    record(json!({"parent": PCI, "podIndex": 3}))
}

fn veth_record() -> Record {
    record(json!({"kind": "veth", "podIndex": 3}))
}

fn found(links: &[LinkInfo], r: &Record, place: Where) -> Option<u32> {
    find_nic(links, r, &owner(), place).map(|l| l.index)
}

#[test]
fn a_hardware_nic_is_its_device_whatever_the_pod_renamed_or_re_maced() {
    let r = hardware_record();
    let renamed = hardware(12, "whatever", "02:00:00:00:00:99");
    assert!(is_the_nic(&renamed, &r));
    assert_eq!(found(&[renamed], &r, Where::Pod), Some(12));
}

#[test]
fn a_link_the_pod_made_to_look_like_the_nic_is_not_it() {
    let r = hardware_record();
    // Same name, MAC, index and our tag, but no device behind it: a pod's dummy or macvlan.
    let forged = tagged(link(3, IFNAME, MAC), &owner());
    assert!(!is_the_nic(&forged, &r));
    assert_eq!(found(std::slice::from_ref(&forged), &r, Where::Pod), None);
    // Beside the real NIC, the real one is chosen.
    let real = hardware(12, "eth9", "02:00:00:00:00:99");
    assert_eq!(found(&[forged, real], &r, Where::Pod), Some(12));
}

#[test]
fn another_device_or_another_permanent_mac_is_not_the_nic() {
    let r = hardware_record();
    let sibling = LinkInfo {
        parent: Some(("0000:3b:00.0".to_owned(), "pci".to_owned())),
        ..link(12, IFNAME, MAC)
    };
    assert!(!is_the_nic(&sibling, &r));
    let r = record(json!({"parent": PCI, "permMac": "b8:3f:d2:00:00:01"}));
    let other_perm = LinkInfo {
        perm_mac: "b8:3f:d2:00:00:02".to_owned(),
        ..hardware(12, IFNAME, MAC)
    };
    assert!(!is_the_nic(&other_perm, &r));
    let same_perm = LinkInfo {
        perm_mac: "b8:3f:d2:00:00:01".to_owned(),
        ..hardware(12, IFNAME, MAC)
    };
    assert!(is_the_nic(&same_perm, &r));
}

#[test]
fn a_virtual_nic_is_the_link_of_its_kind_at_the_recorded_pod_index() {
    let r = veth_record();
    assert!(
        !is_the_nic(&link(3, IFNAME, MAC), &r),
        "no kind: not a veth"
    );
    let macvlan = LinkInfo {
        kind: Some("macvlan".to_owned()),
        ..link(3, IFNAME, MAC)
    };
    assert!(!is_the_nic(&macvlan, &r));
    // Our tag and MAC on a veth at another index do not make it ours; the index does.
    let elsewhere = tagged(veth(5, IFNAME, MAC), &owner());
    let at_index = veth(3, "renamed", "02:00:00:00:00:99");
    assert_eq!(
        found(std::slice::from_ref(&elsewhere), &r, Where::Pod),
        None
    );
    assert_eq!(found(&[elsewhere, at_index], &r, Where::Pod), Some(3));
}

#[test]
fn add_killed_before_noting_the_pod_index_finds_the_nic_by_mac_and_host_index_or_tag() {
    let r = record(json!({"kind": "veth"}));
    // The move kept the host index: ours, tag or none.
    assert_eq!(found(&[veth(7, IFNAME, MAC)], &r, Where::Pod), Some(7));
    // Another index, untagged: still ours (the move had not tagged it yet).
    assert_eq!(found(&[veth(9, IFNAME, MAC)], &r, Where::Pod), Some(9));
    // Another index with another attachment's alias: not ours.
    let foreign = tagged(veth(9, IFNAME, MAC), &owner_key("pod-b", IFNAME));
    assert_eq!(found(&[foreign], &r, Where::Pod), None);
    // Another MAC: not ours.
    assert_eq!(
        found(&[veth(7, IFNAME, "02:00:00:00:00:99")], &r, Where::Pod),
        None
    );
}

#[test]
fn on_the_host_only_a_nic_still_bearing_our_tag_is_lost() {
    let r = hardware_record();
    let home = hardware(7, "ens1f1", MAC);
    assert_eq!(
        found(std::slice::from_ref(&home), &r, Where::Host),
        None,
        "an untagged NIC on the host is at home, not lost"
    );
    let lost = tagged(hardware(7, IFNAME, MAC), &owner());
    assert_eq!(found(&[lost], &r, Where::Host), Some(7));
    let someone_elses = tagged(hardware(7, IFNAME, MAC), &owner_key("pod-b", IFNAME));
    assert_eq!(found(&[someone_elses], &r, Where::Host), None);
    // A tagged virtual link is ours on the host only with the recorded MAC.
    let r = veth_record();
    let lost = tagged(veth(7, IFNAME, MAC), &owner());
    let copy = tagged(veth(8, IFNAME, "02:00:00:00:00:99"), &owner());
    assert_eq!(found(&[copy, lost], &r, Where::Host), Some(7));
}

#[test]
fn a_legacy_record_goes_by_our_tag_or_by_its_mac_on_an_unaliased_link_in_the_pod() {
    let r = record(json!({"hostIndex": 0}));
    assert!(legacy(&r));
    assert_eq!(found(&[link(4, IFNAME, MAC)], &r, Where::Pod), Some(4));
    assert_eq!(found(&[link(4, IFNAME, MAC)], &r, Where::Host), None);
    let with_alias = LinkInfo {
        alias: Some("uplink".to_owned()),
        ..link(4, IFNAME, MAC)
    };
    assert_eq!(found(&[with_alias], &r, Where::Pod), None);
    let by_tag = tagged(link(5, "x", "02:00:00:00:00:99"), &owner());
    assert_eq!(found(&[by_tag], &r, Where::Host), Some(5));
}

#[test]
fn a_nic_held_through_a_process_bearing_another_attachments_tag_is_not_ours() {
    let r = hardware_record();
    let mine = hardware(3, IFNAME, MAC);
    assert!(is_orphaned_nic(&mine, &r, &owner()));
    let since_reused = tagged(hardware(3, IFNAME, MAC), &owner_key("pod-b", IFNAME));
    assert!(!is_orphaned_nic(&since_reused, &r, &owner()));
    // A virtual NIC must also be at the pod index, tagged or with the recorded MAC.
    let r = veth_record();
    assert!(is_orphaned_nic(&veth(3, IFNAME, MAC), &r, &owner()));
    assert!(!is_orphaned_nic(&veth(4, IFNAME, MAC), &r, &owner()));
    assert!(!is_orphaned_nic(
        &veth(3, IFNAME, "02:00:00:00:00:99"),
        &r,
        &owner()
    ));
}

#[test]
fn a_lost_nic_is_restored_from_its_attachments_record() {
    let r = hardware_record();
    let l = tagged(hardware(7, IFNAME, MAC), &owner());
    let tag = Tag::decode(l.alias.as_deref().unwrap()).unwrap();
    let other = record(json!({"containerId": "pod-b", "hostName": "ens2"}));
    assert_eq!(
        record_for_lost(&l, &tag, &[other, r.clone()], "test"),
        Some(r)
    );
}

#[test]
fn a_lost_nic_without_a_record_is_restored_from_its_tag_but_never_to_another_nics_name() {
    let l = tagged(hardware(7, IFNAME, "02:00:00:00:00:99"), &owner());
    let tag = Tag::decode(l.alias.as_deref().unwrap()).unwrap();
    // No record (a DEL ran while the NIC was on its way home): the tag's name, MTU and state,
    // the link's own identity.
    let r = record_for_lost(&l, &tag, &[], "test").expect("restored from the tag");
    assert_eq!(
        (r.host_name.as_str(), r.host_mtu, r.host_up),
        ("ens1f1", 1500, true)
    );
    assert_eq!(r.mac, "02:00:00:00:00:99");
    assert_eq!(r.parent.as_deref(), Some(PCI));
    assert_eq!(r.host_index, 7);
    // The tag names the NIC another attachment holds: the pod wrote it; leave the link alone.
    let holder = record(json!({"containerId": "pod-b"}));
    assert_eq!(record_for_lost(&l, &tag, &[holder], "test"), None);
}

#[test]
fn a_tag_the_pod_forged_on_its_hardware_nic_yields_to_the_record_whose_device_it_is() {
    // Before its pod was force-deleted, the pod rewrote its NIC's alias with a tag of its own:
    // another name, an owner no record has. The NIC is still its attachment's by its device.
    let forged = Tag {
        host_name: "victim0".to_owned(),
        host_mtu: 1280,
        host_up: true,
        owner: owner_key("nobody", "net9"),
    };
    let l = LinkInfo {
        alias: Some(forged.encode()),
        ..hardware(7, IFNAME, MAC)
    };
    let mine = hardware_record();
    let other =
        record(json!({"containerId": "pod-b", "hostName": "ens2", "parent": "pci/0000:5e:00.0"}));
    let r = record_for_lost(&l, &forged, &[other, mine.clone()], "test").expect("restored");
    assert_eq!((r.host_name.as_str(), r.host_mtu), ("ens1f1", 1500));
    assert_eq!(r, mine);
    // A virtual NIC has no device to tell it by: the tag rule stays (never another NIC's name).
    let v = LinkInfo {
        alias: Some(forged.encode()),
        ..veth(7, IFNAME, MAC)
    };
    let r = record_for_lost(&v, &forged, &[veth_record()], "test").expect("from the tag");
    assert_eq!(r.host_name, "victim0");
}

#[test]
fn del_first_finds_its_hardware_nic_under_a_tag_its_pod_forged_but_not_a_later_attachments() {
    // The pod wrote a tag of our form naming an owner no record has, then died; its own DEL
    // comes first (attack review L1): the NIC is still its by its device.
    let mine = hardware_record();
    let forged = tagged(hardware(9, "net1", MAC), &owner_key("nobody", "net9"));
    assert_eq!(
        found(std::slice::from_ref(&forged), &mine, Where::Host),
        None
    );
    let hit = lost_under_another_tag(
        std::slice::from_ref(&forged),
        &mine,
        std::slice::from_ref(&mine),
    );
    assert_eq!(hit.map(|l| l.index), Some(9));
    // A later attachment's NIC, under its own tag and with its own record: not this DEL's.
    let later = record(json!({"containerId": "pod-b", "parent": PCI, "podIndex": 4}));
    let theirs = tagged(hardware(9, "net1", MAC), &later.owner());
    let records = [mine.clone(), later];
    assert_eq!(lost_under_another_tag(&[theirs], &mine, &records), None);
    // Another device under the forged tag, an untagged NIC at home, a virtual NIC: none.
    let elsewhere = LinkInfo {
        parent: Some(("0000:5e:00.0".to_owned(), "pci".to_owned())),
        ..forged.clone()
    };
    let at_home = hardware(9, "ens1f1", MAC);
    for l in [elsewhere, at_home] {
        assert_eq!(
            lost_under_another_tag(&[l], &mine, std::slice::from_ref(&mine)),
            None
        );
    }
    let v = veth_record();
    let vlink = tagged(veth(9, "net1", MAC), &owner_key("nobody", "net9"));
    assert_eq!(
        lost_under_another_tag(&[vlink], &v, std::slice::from_ref(&v)),
        None
    );
}

#[test]
fn a_forged_tag_naming_another_live_attachment_yields_to_the_record_whose_device_it_is() {
    // The pod learnt another attachment's container ID (the exporter's labels show them) and
    // wrote its owner key into its NIC's tag. That record has another device: it is not this
    // NIC's, so neither a later ADD, GC or STATUS nor this attachment's own DEL restores the
    // NIC under the other attachment's name.
    let mine = hardware_record();
    let other = record(json!({"containerId": "pod-b", "hostName": "ens2",
        "parent": "pci/0000:5e:00.0", "podIndex": 4}));
    let forged = tagged(hardware(9, "net1", MAC), &other.owner());
    let records = [other.clone(), mine.clone()];
    let tag = forged
        .alias
        .as_deref()
        .and_then(Tag::decode)
        .expect("our tag");
    let r = record_for_lost(&forged, &tag, &records, "test").expect("restored");
    assert_eq!(r.host_name, "ens1f1", "not the other attachment's ens2");
    let hit = lost_under_another_tag(std::slice::from_ref(&forged), &mine, &records);
    assert_eq!(hit.map(|l| l.index), Some(9));
}
