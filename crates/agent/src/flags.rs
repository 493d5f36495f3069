//! The values the agent's subcommands read from their flags, as clap value parsers: each
//! returns what is wrong as text, which clap prints with the subcommand's usage. The options
//! themselves are each subcommand's `Options` (derived with clap), and `cli.rs` the command.

use rdma_host_device_core::node::Memlock;
use std::path::PathBuf;

/// A path that must be absolute (directories and files the agent opens as the node has them).
pub(crate) fn absolute_path(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if !p.is_absolute() {
        return Err(format!("{s:?} must be an absolute path"));
    }
    Ok(p)
}

/// A memlock limit: bytes (at least a page) or `unlimited`.
pub fn memlock(s: &str) -> Result<Memlock, String> {
    Memlock::parse(s).map_err(|e| e.msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_absolute() {
        assert_eq!(absolute_path("/a/b").unwrap(), PathBuf::from("/a/b"));
        assert_eq!(
            absolute_path("rel").unwrap_err(),
            "\"rel\" must be an absolute path"
        );
    }

    #[test]
    fn a_memlock_limit_is_bytes_or_unlimited_and_says_why_not() {
        assert_eq!(memlock("unlimited").unwrap(), Memlock::Unlimited);
        assert_eq!(memlock("65536").unwrap(), Memlock::Bytes(65536));
        assert!(memlock("0").unwrap_err().contains("less than one page"));
        assert!(!memlock("1G").unwrap_err().contains("code"), "no CNI code");
    }
}
