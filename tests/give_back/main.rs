//! Give back: a NIC comes home as it left, whatever happened to it or to the plugin.
//! - `home`: what a pod with NET_ADMIN did to its NIC does not come home with it;
//! - `lost_nic`: a pod's netns died without DEL, the kernel returned the NIC;
//! - `gc`: CNI GC releases what the runtime no longer lists;
//! - `faults`: the plugin killed, failing or panicking at every step boundary;
//! - `upgrade`: one version's attachments checked and given back by the next.

mod faults;
mod gc;
mod home;
mod lost_nic;
mod upgrade;
