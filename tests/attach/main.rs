//! Attach: the plugin's ADD, CHECK and DEL as runtimes call them, the NIC in the pod with what
//! the IPAM plugin gave it. One module per way in or per thing a pod gets:
//! - `libcni`: through a real CNI client, Debian's libcni;
//! - `multus`: as Multus delegates, one NAD of conf/multus/ each;
//! - `device_info`: the device-info file Multus asks for;
//! - `routes`: the 1.1.0 route fields;
//! - `announce`: gratuitous ARP, unsolicited NA, IPv6 usable at once;
//! - `dhcp`: a DHCP lease got and given back;
//! - `stress`: two ADDs for one NIC, calls on different NICs, a random parallel run.

mod announce;
mod device_info;
mod dhcp;
mod libcni;
mod multus;
mod routes;
mod stress;
