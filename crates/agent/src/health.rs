//! Is a device usable: the one judge behind `ListAndWatch`'s `Healthy`/`Unhealthy`, the DRA
//! slice's taint (`dra::slices`) and the kubelet's device health stream (`dra::resource_health`,
//! KEP-4680), so the three never disagree. Every unhealthy verdict carries a word (the taint's
//! value) and a sentence (what the kubelet shows in the pod's `allocatedResourcesStatus`).
//!
//! Where a NIC is decides where it is looked at:
//! - on the host: its netdev in `/sys/class/net`, its RDMA device in `/sys/class/infiniband`;
//! - in a pod: inside the pod's netns, as its attachment record names it (path, the namespace's
//!   identity, the NIC's ifindex there): one RTM_GETLINK by index and, for an RDMA NIC, RDMA
//!   netlink from there (the port whose netdev is that ifindex, whatever the device is called
//!   now). Only our attachments' namespaces are entered, never another pod's. A namespace that
//!   cannot be entered (gone with its pod, or the agent lacks CAP_SYS_ADMIN), or a NIC not in
//!   it (on its way in or home: ADD saves the record first, DEL removes it last) is `Unknown`
//!   for the link, and says why;
//! - wherever it is: its PCI function in `/sys/bus/pci/devices/<bdf>` (not per netns): gone,
//!   disabled, or its uncorrectable AER counters (`aer_dev_fatal`, `aer_dev_nonfatal`) rising.
//!
//! Unhealthy when: the PCI function is gone or disabled; an AER counter rose (for
//! [`AER_HOLD`] after the last rise: the counters never go down); the netdev is gone; it is up
//! without carrier; its RDMA device is gone; a port of its RDMA device is DOWN while the link
//! has carrier. An admin-down NIC (how free NICs wait on the host; a pod may set its own down)
//! has no carrier to judge. The rule is [`verdict`], pure; [`Judge`] adds the AER memory.

use rdma_host_device_core::inventory::{InPod, Nic};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a PCI function stays Unhealthy after its uncorrectable error count last rose.
pub const AER_HOLD: Duration = Duration::from_secs(120);
/// A netlink request inside a pod's netns gives up after this long.
const POD_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the NIC's netdev was looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Place {
    #[default]
    Host,
    /// In its pod's netns.
    Pod,
    /// In a pod whose netns could not be entered, and why.
    Unreachable(String),
}

/// What a look found about a NIC now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    pub at: Place,
    /// Its netdev is there (on the host; or in the pod, by its ifindex).
    pub present: bool,
    /// IFF_UP.
    pub admin_up: bool,
    /// The carrier: unknown (`None`) while the link is admin down.
    pub carrier: Option<bool>,
    /// Its RDMA device (if it had one) is still there (true when RDMA netlink cannot tell).
    pub rdma_present: bool,
    /// A port of its RDMA device says `DOWN`.
    pub port_down: bool,
    /// Its PCI function, for a NIC that has one.
    pub pci: Option<PciSeen>,
}

/// A PCI function as sysfs shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PciSeen {
    /// `/sys/bus/pci/devices/<bdf>` exists.
    pub present: bool,
    /// `enable` (how many enabled it: 0 when no driver holds it), when readable.
    pub enabled: Option<bool>,
    /// Uncorrectable AER error totals (`TOTAL_ERR_FATAL`, `TOTAL_ERR_NONFATAL`), when the
    /// kernel counts them for this function (4.19+, AER enabled).
    pub aer: Option<Aer>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Aer {
    pub fatal: u64,
    pub nonfatal: u64,
}

/// The judge's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Healthy,
    /// Nothing wrong was seen, but the link could not be looked at: why.
    Unknown(String),
    /// `word` is the taint's value (`link-down`), `why` the sentence for people.
    Unhealthy {
        word: &'static str,
        why: String,
    },
}

impl Health {
    pub(crate) fn is_unhealthy(&self) -> bool {
        matches!(self, Health::Unhealthy { .. })
    }

    /// The taint's value, when unhealthy.
    pub(crate) fn word(&self) -> Option<&'static str> {
        match self {
            Health::Unhealthy { word, .. } => Some(word),
            _ => None,
        }
    }

    /// What the kubelet shows: `link-down: net1 in the pod is up without carrier`.
    pub fn message(&self) -> String {
        match self {
            Health::Healthy => String::new(),
            Health::Unknown(why) => why.clone(),
            Health::Unhealthy { word, why } => format!("{word}: {why}"),
        }
    }
}

fn bad(word: &'static str, why: String) -> Health {
    Health::Unhealthy { word, why }
}

/// The rule: `nic` as `seen`, `aer_rise` saying how its AER counters rose within the hold-down
/// (`Judge` keeps that memory).
pub fn verdict(nic: &Nic, seen: &Seen, aer_rise: Option<&str>) -> Health {
    if let (Some(bdf), Some(pci)) = (&nic.pci, &seen.pci) {
        if !pci.present {
            return bad(
                "pci-gone",
                format!("its PCI function {bdf} is gone (removed or hot-unplugged)"),
            );
        }
        if pci.enabled == Some(false) {
            return bad(
                "pci-disabled",
                format!("its PCI function {bdf} is disabled (no driver holds it)"),
            );
        }
    }
    if let Some(rise) = aer_rise {
        return bad("pci-error", rise.to_owned());
    }
    let (name, where_) = match (&seen.at, &nic.pod) {
        (Place::Unreachable(why), _) => return Health::Unknown(why.clone()),
        (Place::Pod, Some(p)) => (p.ifname.as_str(), " in the pod"),
        _ => (nic.name.as_str(), ""),
    };
    if !seen.present {
        return match seen.at {
            Place::Pod => bad(
                "gone",
                format!("its interface {name} is gone from the pod's network namespace"),
            ),
            _ => bad("gone", format!("its netdev {name} is gone from the host")),
        };
    }
    if seen.admin_up && seen.carrier == Some(false) {
        return bad("link-down", format!("{name}{where_} is up without carrier"));
    }
    if let Some(dev) = &nic.rdma_device {
        if !seen.rdma_present {
            return bad("rdma-device-gone", format!("its RDMA device {dev} is gone"));
        }
        if seen.admin_up && seen.carrier == Some(true) && seen.port_down {
            return bad(
                "rdma-port-down",
                format!("its RDMA device {dev} has a port DOWN while {name}{where_} has carrier"),
            );
        }
    }
    Health::Healthy
}

/// [`verdict`] with a memory of each PCI function's AER counters: a rise since the last look
/// is Unhealthy for [`AER_HOLD`]. The first look at a function is its baseline (errors counted
/// before the agent started are not news).
#[derive(Debug, Default)]
pub struct Judge {
    aer: HashMap<String, AerMemory>,
}

#[derive(Debug)]
struct AerMemory {
    last: Aer,
    rose: Option<(Instant, String)>,
}

impl Judge {
    pub fn judge(&mut self, nic: &Nic, seen: &Seen, now: Instant) -> Health {
        let rise = self.aer_rise(nic, seen, now);
        verdict(nic, seen, rise.as_deref())
    }

    fn aer_rise(&mut self, nic: &Nic, seen: &Seen, now: Instant) -> Option<String> {
        let bdf = nic.pci.as_deref()?;
        let aer = seen.pci.as_ref()?.aer?;
        let m = self.aer.entry(bdf.to_owned()).or_insert(AerMemory {
            last: aer,
            rose: None,
        });
        if aer.fatal > m.last.fatal || aer.nonfatal > m.last.nonfatal {
            m.rose = Some((
                now,
                format!(
                    "its PCI function {bdf} reported uncorrectable errors (AER: {} fatal, {} non-fatal in all, up from {} and {}); Unhealthy until {} s pass without another",
                    aer.fatal,
                    aer.nonfatal,
                    m.last.fatal,
                    m.last.nonfatal,
                    AER_HOLD.as_secs()
                ),
            ));
        }
        m.last = aer;
        match &m.rose {
            Some((at, why)) if now.duration_since(*at) < AER_HOLD => Some(why.clone()),
            _ => None,
        }
    }

    /// The PCI functions held Unhealthy now by an AER rise: a caller that re-judges only on
    /// change notices a hold-down ending by this changing.
    pub fn holding(&self, now: Instant) -> Vec<String> {
        let mut v: Vec<String> = self
            .aer
            .iter()
            .filter(|(_, m)| {
                m.rose
                    .as_ref()
                    .is_some_and(|(at, _)| now.duration_since(*at) < AER_HOLD)
            })
            .map(|(bdf, _)| bdf.clone())
            .collect();
        v.sort();
        v
    }
}

/// Look at `nic` where it is (`sys` is `/sys`): on the host, or in its pod when it is attached
/// and its record says where.
pub fn look(sys: &Path, nic: &Nic) -> Seen {
    let mut seen = match (&nic.pod, nic.attached) {
        (Some(pod), true) => look_in_pod(pod, nic.rdma_device.as_deref()),
        _ => look_on_host(sys, nic),
    };
    seen.pci = nic.pci.as_deref().map(|bdf| look_at_pci(sys, bdf));
    seen
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned())
}

fn look_on_host(sys: &Path, nic: &Nic) -> Seen {
    let net = sys.join("class/net").join(&nic.name);
    let flags = read(&net.join("flags"))
        .and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok());
    let mut seen = Seen {
        present: flags.is_some(),
        admin_up: flags.is_some_and(|f| f & libc::IFF_UP as u32 != 0),
        carrier: read(&net.join("carrier")).map(|c| c == "1"),
        ..Seen::default()
    };
    if let Some(dev) = &nic.rdma_device {
        let ports = sys.join("class/infiniband").join(dev).join("ports");
        seen.rdma_present = ports.is_dir();
        seen.port_down = rdma_host_device_core::sysfs::list_dir(&ports)
            .iter()
            .filter_map(|p| read(&ports.join(p).join("state")))
            .any(|s| s.ends_with("DOWN"));
    }
    seen
}

/// The PCI function `bdf` in `sys`: there, enabled, its uncorrectable AER totals.
pub fn look_at_pci(sys: &Path, bdf: &str) -> PciSeen {
    let dir = sys.join("bus/pci/devices").join(bdf);
    let total = |file: &str, key: &str| -> Option<u64> {
        read(&dir.join(file))?
            .lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
    };
    let aer = match (
        total("aer_dev_fatal", "TOTAL_ERR_FATAL"),
        total("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
    ) {
        (None, None) => None,
        (f, n) => Some(Aer {
            fatal: f.unwrap_or(0),
            nonfatal: n.unwrap_or(0),
        }),
    };
    PciSeen {
        present: dir.is_dir(),
        enabled: read(&dir.join("enable")).map(|e| e != "0"),
        aer,
    }
}

/// Inside the pod's netns (the one ADD attached in, by identity): the NIC by its ifindex, and
/// its RDMA device by the port paired with that ifindex.
fn look_in_pod(pod: &InPod, rdma: Option<&str>) -> Seen {
    use rdma_host_device_core::netns::Netns;
    let unreachable = |why: String| Seen {
        at: Place::Unreachable(why),
        ..Seen::default()
    };
    let ns = match Netns::open(Path::new(&pod.netns)).and_then(|ns| {
        ns.refuse_if_not(pod.netns_id)?;
        Ok(ns)
    }) {
        Ok(ns) => ns,
        Err(e) => {
            return unreachable(format!(
                "its pod's network namespace cannot be looked at: {}",
                e.msg
            ));
        }
    };
    let inside = ns.within(|| {
        let link = crate::metrics::netdev::stats(pod.index, &pod.ifname, POD_TIMEOUT);
        let rdma = rdma.map(|name| rdma_in_pod(name, pod.index));
        (link, rdma)
    });
    let (link, rdma) = match inside {
        Ok(x) => x,
        Err(e) => {
            return unreachable(format!(
                "its pod's network namespace cannot be entered ({}; the agent needs CAP_SYS_ADMIN)",
                e.msg
            ));
        }
    };
    let mut seen = Seen {
        at: Place::Pod,
        ..Seen::default()
    };
    match link {
        Ok(l) => {
            seen.present = true;
            seen.admin_up = l.admin_up;
            seen.carrier = l.admin_up.then_some(l.carrier);
        }
        // Not there: on its way in (ADD saved the record first) or home (DEL removes the record
        // last), or deleted in the pod. Not a fault of the device to report; a NIC whose
        // device went away is caught by its PCI function.
        Err(crate::metrics::netdev::NetdevError::NotFound) => {
            return unreachable(format!(
                "its interface {} is not in its pod's network namespace (being attached or given back?)",
                pod.ifname
            ));
        }
        Err(e) => return unreachable(format!("reading {} in its pod: {e}", pod.ifname)),
    }
    (seen.rdma_present, seen.port_down) = rdma.unwrap_or((true, false));
    seen
}

/// (present, a port DOWN) of the RDMA device paired with ifindex `index` in the calling
/// thread's netns (`name`, the one ADD recorded, only for records without the index). RDMA
/// netlink that cannot answer tells nothing: (true, false).
fn rdma_in_pod(name: &str, index: Option<u32>) -> (bool, bool) {
    use rdma_host_device_core::rdma::netlink::RdmaSocket;
    let Ok(mut sock) = RdmaSocket::open().and_then(|mut s| s.set_timeout(POD_TIMEOUT).map(|_| s))
    else {
        return (true, false);
    };
    let Ok(list) = sock.device_list() else {
        return (true, false);
    };
    for d in list {
        let Ok(ports) = sock.ports_of(d.index) else {
            continue;
        };
        let ours = match index {
            Some(ix) => ports.iter().any(|p| p.netdev_index == Some(ix)),
            None => d.name == name,
        };
        if ours {
            return (true, ports.iter().any(|p| p.state == Some(1)));
        }
    }
    (false, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(rdma: Option<&str>) -> Nic {
        Nic::for_test("0000:3b:00.0", "ens1", rdma)
    }

    fn in_pod(rdma: Option<&str>) -> Nic {
        Nic {
            attached: true,
            pod: Some(InPod {
                netns: "/var/run/netns/cni-1".into(),
                netns_id: Some((4, 4026532000)),
                ifname: "net1".into(),
                index: Some(3),
            }),
            ..nic(rdma)
        }
    }

    fn pci_ok() -> Option<PciSeen> {
        Some(PciSeen {
            present: true,
            enabled: Some(true),
            aer: Some(Aer::default()),
        })
    }

    fn up(at: Place) -> Seen {
        Seen {
            at,
            present: true,
            admin_up: true,
            carrier: Some(true),
            rdma_present: true,
            port_down: false,
            pci: pci_ok(),
        }
    }

    fn word(h: Health) -> Option<&'static str> {
        h.word()
    }

    #[test]
    fn health_follows_the_wire_on_the_host_and_in_the_pod() {
        for (n, at) in [
            (nic(Some("mlx5_0")), Place::Host),
            (in_pod(Some("mlx5_0")), Place::Pod),
        ] {
            let ok = up(at);
            assert_eq!(verdict(&n, &ok, None), Health::Healthy);
            let admin_down = Seen {
                admin_up: false,
                carrier: None,
                port_down: true,
                ..ok.clone()
            };
            assert_eq!(
                verdict(&n, &admin_down, None),
                Health::Healthy,
                "admin down: free (or the pod's own choice), not broken"
            );
            for (seen, w) in [
                (
                    Seen {
                        present: false,
                        ..ok.clone()
                    },
                    "gone",
                ),
                (
                    Seen {
                        carrier: Some(false),
                        ..ok.clone()
                    },
                    "link-down",
                ),
                (
                    Seen {
                        rdma_present: false,
                        ..ok.clone()
                    },
                    "rdma-device-gone",
                ),
                (
                    Seen {
                        port_down: true,
                        ..ok.clone()
                    },
                    "rdma-port-down",
                ),
            ] {
                assert_eq!(
                    word(verdict(&n, &seen, None)),
                    Some(w),
                    "{:?}: {seen:?}",
                    n.pod
                );
            }
            // Without an RDMA device only the netdev counts.
            let plain = Nic {
                rdma_device: None,
                ..n.clone()
            };
            assert_eq!(
                verdict(
                    &plain,
                    &Seen {
                        rdma_present: false,
                        ..ok
                    },
                    None
                ),
                Health::Healthy
            );
        }
        // The sentence the kubelet shows names the interface where it is.
        let h = verdict(
            &in_pod(None),
            &Seen {
                carrier: Some(false),
                ..up(Place::Pod)
            },
            None,
        );
        assert_eq!(
            h.message(),
            "link-down: net1 in the pod is up without carrier"
        );
        let h = verdict(
            &in_pod(None),
            &Seen {
                present: false,
                ..up(Place::Pod)
            },
            None,
        );
        assert!(
            h.message().contains("net1 is gone from the pod"),
            "{}",
            h.message()
        );
    }

    #[test]
    fn a_pod_that_cannot_be_looked_into_is_unknown_unless_its_pci_function_says_otherwise() {
        let n = in_pod(Some("mlx5_0"));
        let away = Seen {
            at: Place::Unreachable("no netns".into()),
            pci: pci_ok(),
            ..Seen::default()
        };
        assert_eq!(verdict(&n, &away, None), Health::Unknown("no netns".into()));
        assert!(!verdict(&n, &away, None).is_unhealthy());
        let gone = Seen {
            pci: Some(PciSeen::default()),
            ..away
        };
        assert_eq!(word(verdict(&n, &gone, None)), Some("pci-gone"));
    }

    #[test]
    fn a_pci_function_gone_or_disabled_is_unhealthy_wherever_the_nic_is() {
        for n in [nic(None), in_pod(None)] {
            let at = if n.attached { Place::Pod } else { Place::Host };
            let gone = Seen {
                pci: Some(PciSeen::default()),
                ..up(at.clone())
            };
            let h = verdict(&n, &gone, None);
            assert_eq!(h.word(), Some("pci-gone"));
            assert!(h.message().contains("0000:3b:00.0"), "{}", h.message());
            let off = Seen {
                pci: Some(PciSeen {
                    present: true,
                    enabled: Some(false),
                    aer: None,
                }),
                ..up(at)
            };
            assert_eq!(word(verdict(&n, &off, None)), Some("pci-disabled"));
        }
        // A virtual NIC has no PCI function to lose.
        let mut veth = nic(None);
        veth.pci = None;
        assert_eq!(
            verdict(
                &veth,
                &Seen {
                    pci: None,
                    ..up(Place::Host)
                },
                None
            ),
            Health::Healthy
        );
    }

    #[test]
    fn a_rising_aer_count_is_unhealthy_for_the_hold_down_and_old_counts_are_not() {
        let n = in_pod(None);
        let with = |fatal, nonfatal| Seen {
            pci: Some(PciSeen {
                present: true,
                enabled: Some(true),
                aer: Some(Aer { fatal, nonfatal }),
            }),
            ..up(Place::Pod)
        };
        let mut j = Judge::default();
        let t0 = Instant::now();
        // Errors counted before the first look are the baseline.
        assert_eq!(j.judge(&n, &with(2, 5), t0), Health::Healthy);
        assert_eq!(
            j.judge(&n, &with(2, 5), t0 + Duration::from_secs(1)),
            Health::Healthy
        );
        let h = j.judge(&n, &with(2, 6), t0 + Duration::from_secs(2));
        assert_eq!(h.word(), Some("pci-error"));
        assert!(
            h.message().contains("1 fatal") || h.message().contains("2 fatal"),
            "{}",
            h.message()
        );
        assert!(h.message().contains("0000:3b:00.0"), "{}", h.message());
        assert_eq!(j.holding(t0 + Duration::from_secs(3)), ["0000:3b:00.0"]);
        // Still held while nothing new comes, for the hold-down.
        let later = t0 + Duration::from_secs(2) + AER_HOLD - Duration::from_secs(1);
        assert!(j.judge(&n, &with(2, 6), later).is_unhealthy());
        let after = t0 + Duration::from_secs(2) + AER_HOLD;
        assert_eq!(j.judge(&n, &with(2, 6), after), Health::Healthy);
        assert!(j.holding(after).is_empty());
        // A fatal one starts it again.
        assert!(j.judge(&n, &with(3, 6), after).is_unhealthy());
    }

    #[test]
    fn sysfs_facts_are_read_from_the_tree() {
        let root = std::env::temp_dir().join(format!("rhd-health-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let net = root.join("class/net/ens1");
        let port = root.join("class/infiniband/mlx5_0/ports/1");
        let pci = root.join("bus/pci/devices/0000:3b:00.0");
        for d in [&net, &port, &pci] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(net.join("flags"), "0x1003\n").unwrap();
        std::fs::write(net.join("carrier"), "1\n").unwrap();
        std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        std::fs::write(pci.join("enable"), "1\n").unwrap();
        // As the kernel writes them (drivers/pci/pcie/aer.c).
        std::fs::write(
            pci.join("aer_dev_fatal"),
            "Undefined 0\nDLP 0\nSDES 0\nTLP 1\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\nAtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_FATAL 1\n",
        )
        .unwrap();
        std::fs::write(
            pci.join("aer_dev_nonfatal"),
            "Undefined 0\nTOTAL_ERR_NONFATAL 7\n",
        )
        .unwrap();
        let n = nic(Some("mlx5_0"));
        assert_eq!(
            look(&root, &n),
            Seen {
                at: Place::Host,
                present: true,
                admin_up: true,
                carrier: Some(true),
                rdma_present: true,
                port_down: false,
                pci: Some(PciSeen {
                    present: true,
                    enabled: Some(true),
                    aer: Some(Aer {
                        fatal: 1,
                        nonfatal: 7
                    }),
                }),
            }
        );
        std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
        assert!(look(&root, &n).port_down);
        std::fs::write(pci.join("enable"), "0\n").unwrap();
        assert_eq!(look(&root, &n).pci.unwrap().enabled, Some(false));
        std::fs::remove_dir_all(&net).unwrap();
        std::fs::remove_dir_all(&pci).unwrap();
        let s = look(&root, &n);
        assert!(!s.present);
        assert_eq!(
            s.pci,
            Some(PciSeen::default()),
            "gone: not there, nothing read"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_nic_whose_pod_netns_is_gone_is_looked_at_no_further() {
        let mut n = in_pod(None);
        n.pci = None;
        if let Some(p) = &mut n.pod {
            p.netns = "/nonexistent/netns/cni-gone".into();
        }
        let s = look(Path::new("/nonexistent"), &n);
        assert!(matches!(s.at, Place::Unreachable(_)), "{s:?}");
        assert!(matches!(verdict(&n, &s, None), Health::Unknown(_)));
    }
}
