//! RDMA netlink (NETLINK_RDMA). Owned by the rdma-netlink work.
