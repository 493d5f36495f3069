//! Confinement: what a tenant's NAD, an IPAM plugin, hostile input or a neighbour pod cannot
//! make the plugin do.
//! - `bad_input`: bad CNI_* and configs, each one error JSON with its code, the NIC untouched;
//! - `fuzz`: the fuzz corpus's mutants and pathological inputs through the binary;
//! - `tenant`: one hostile or careless tenant's try per test (docs/trust.md's rows);
//! - `ipam`: the kernel bounds what an IPAM plugin does;
//! - `neighbours`: a pod with NET_ADMIN does not ride another pod's NIC.

mod bad_input;
mod fuzz;
mod ipam;
mod neighbours;
mod tenant;
