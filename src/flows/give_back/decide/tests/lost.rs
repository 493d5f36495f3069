//! Which links on the host GC restores as lost NICs ([`lost_to_give_back`]): plain data in, no netlink, no root.

use crate::flows::give_back::decide::*;
use rdma_host_device_core::state::owner_key;

fn link(alias: Option<String>) -> LinkInfo {
    LinkInfo {
        index: 7,
        name: "net1".to_owned(),
        alias,
        ..LinkInfo::default()
    }
}

fn tagged_by(cid: &str) -> LinkInfo {
    let tag = Tag {
        host_name: "ens1f1".to_owned(),
        host_mtu: 1500,
        host_up: true,
        owner: owner_key(cid, "net1"),
    };
    link(Some(tag.encode()))
}

fn set(cids: &[&str]) -> HashSet<String> {
    cids.iter().map(|c| owner_key(c, "net1")).collect()
}

#[test]
fn a_nic_tagged_by_an_attachment_the_runtime_no_longer_lists_is_restored_under_its_tag() {
    let tag = lost_to_give_back(&tagged_by("gone"), &set(&["running"]), &set(&[]));
    assert_eq!(tag.map(|t| t.host_name), Some("ens1f1".to_owned()));
}

#[test]
fn a_valid_attachments_nic_an_untagged_link_and_an_operators_alias_are_left_alone() {
    let valid = set(&["running"]);
    let none = set(&[]);
    assert_eq!(
        lost_to_give_back(&tagged_by("running"), &valid, &none),
        None
    );
    assert_eq!(lost_to_give_back(&link(None), &valid, &none), None);
    let operators = link(Some("uplink to rack 3".to_owned()));
    assert_eq!(lost_to_give_back(&operators, &valid, &none), None);
}

#[test]
fn an_attachment_this_gc_already_released_is_not_restored_twice() {
    let tried = set(&["stale"]);
    assert_eq!(
        lost_to_give_back(&tagged_by("stale"), &set(&[]), &tried),
        None
    );
}
