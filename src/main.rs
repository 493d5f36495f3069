#![allow(dead_code)]
mod rdma;
fn main() {}
