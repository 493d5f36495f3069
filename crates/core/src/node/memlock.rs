//! `memlock`: the RLIMIT_MEMLOCK a container given an RDMA device gets (the node's setting, the
//! CDI spec's hook argument, `cdi --memlock`).

use crate::error::{Code, Error, Result};

/// RLIMIT_MEMLOCK for containers given an RDMA device: a number of bytes, or unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memlock {
    Unlimited,
    Bytes(u64),
}

/// The smallest `memlock` taken: one page.
pub const MIN_MEMLOCK: u64 = 4096;

impl Memlock {
    pub fn parse(s: &str) -> Result<Memlock> {
        match s {
            "unlimited" | "infinity" => Ok(Memlock::Unlimited),
            _ => match s.parse::<u64>() {
                // Less than a page locks nothing: every RDMA memory registration would fail
                // in the container (0 is not "no limit").
                Ok(n) if n < MIN_MEMLOCK => Err(Error::new(
                    Code::InvalidConfig,
                    format!(
                        "memlock {s:?} is less than one page ({MIN_MEMLOCK} bytes): RDMA memory registration would fail in every container; give the bytes to allow (RDMA needs megabytes) or \"unlimited\""
                    ),
                )),
                Ok(n) => Ok(Memlock::Bytes(n)),
                Err(_) => Err(Error::new(
                    Code::InvalidConfig,
                    format!("memlock {s:?}: a number of bytes or \"unlimited\""),
                )),
            },
        }
    }

    pub fn as_arg(self) -> String {
        match self {
            Memlock::Unlimited => "unlimited".into(),
            Memlock::Bytes(n) => n.to_string(),
        }
    }

    pub fn as_rlim(self) -> libc::rlim_t {
        match self {
            Memlock::Unlimited => libc::RLIM_INFINITY,
            Memlock::Bytes(n) => n as libc::rlim_t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_values() {
        assert_eq!(Memlock::parse("unlimited").unwrap(), Memlock::Unlimited);
        assert_eq!(
            Memlock::parse("1073741824").unwrap(),
            Memlock::Bytes(1 << 30)
        );
        assert!(Memlock::parse("-1").is_err());
        for tiny in ["0", "1", "4095"] {
            let e = Memlock::parse(tiny).unwrap_err();
            assert!(e.msg.contains("less than one page"), "{tiny}: {}", e.msg);
        }
        assert_eq!(Memlock::parse("4096").unwrap(), Memlock::Bytes(4096));
        assert!(Memlock::parse("1G").is_err());
    }
}
