//! The RDMA half: talking to the kernel's RDMA netlink, and querying GIDs through verbs.
pub mod identity;
pub mod netlink;
pub mod pair;
pub mod users;
pub mod verbs;
