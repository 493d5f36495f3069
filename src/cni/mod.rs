//! The CNI spec's types and protocol: environment, network configuration, results, versions.
pub mod env;
pub mod netconf;
pub mod result;
pub mod version;
