//! The operator's command line: what a person gets when running the binary by hand.

const HELP: &str = "\
rdma-host-device: a CNI plugin that moves a host NIC and its RDMA device into a pod.

It is run by a container runtime (containerd, CRI-O, Multus) with CNI_COMMAND set and the
network configuration on stdin. By hand:

  rdma-host-device --version   print the version and the CNI versions it speaks
  rdma-host-device --help      this text

See the README for the configuration reference and error codes.
";

/// Returns the process exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--version" | "-V" | "version") => {
            println!(
                "rdma-host-device {} (CNI {})",
                env!("CARGO_PKG_VERSION"),
                crate::cni::version::supported_list()
            );
            0
        }
        Some("--help" | "-h" | "help") => {
            print!("{HELP}");
            0
        }
        _ => {
            eprint!("{HELP}");
            2
        }
    }
}
