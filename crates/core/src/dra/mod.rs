//! What the DRA driver (the agent's `dra`) and the CNI plugin agree on: the driver's name and
//! the checkpoint of the claims it prepared, which ADD reads for a `draRequest`. Here, below
//! both programs, so the plugin reads it without linking the driver.

pub mod checkpoint;
pub mod metadata;

/// The driver's name: the ResourceSlices' `spec.driver`, the DeviceClass's selector, the
/// domain of our device attributes, and the allocation results prepare takes as ours.
pub const DRIVER: &str = "rdma-host-device.io";
