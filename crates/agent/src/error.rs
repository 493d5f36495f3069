//! The agent's one error type. The CNI plugin answers a container runtime, whose contract is a
//! CNI code (core's `error::Error`); the agent answers a person (an exit code and a line on
//! stderr, a log line) and the kubelet (a gRPC status). So its error says which side failed and
//! what to do, and keeps core's error whole where core reported it: `validate` prints its code,
//! because that is the answer ADD would give.

use rdma_host_device_core::error::Error as CoreError;
use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// A flag, the node configuration or a request is not acceptable: what, and how to fix it.
    Invalid(String),
    /// Something of the node failed us (a file, a socket, netlink, a runtime): what we did and
    /// why.
    Node(String),
    /// The Kubernetes API server answered no, or not at all (its code, reason and the fix).
    Api(Box<crate::kube::ApiError>),
    /// What core reported (the node configuration, the kernel side, files), its CNI code kept.
    Core(CoreError),
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// A flag, a setting or a request that is not acceptable.
pub(crate) fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

/// `what` failed on the node, because of `e`.
pub fn failed(what: impl fmt::Display, e: impl fmt::Display) -> Error {
    Error::Node(format!("{what}: {e}"))
}

impl Error {
    /// The same error, said to be about `what`.
    pub fn context(self, what: impl fmt::Display) -> Error {
        match self {
            Error::Invalid(m) => Error::Invalid(format!("{what}: {m}")),
            Error::Node(m) => Error::Node(format!("{what}: {m}")),
            Error::Api(e) => Error::Node(format!("{what}: Kubernetes API: {e}")),
            Error::Core(e) => Error::Core(e.context(what)),
        }
    }

    /// Core's error, when core reported it (its CNI code is `validate`'s answer).
    pub fn core(&self) -> Option<&CoreError> {
        match self {
            Error::Core(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid(m) | Error::Node(m) => f.write_str(m),
            Error::Api(e) => write!(f, "Kubernetes API: {e}"),
            // The CNI code is the runtime's contract, not a person's: left out.
            Error::Core(e) if e.details.is_empty() => f.write_str(&e.msg),
            Error::Core(e) => write!(f, "{}: {}", e.msg, e.details),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Api(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl From<CoreError> for Error {
    fn from(e: CoreError) -> Error {
        Error::Core(e)
    }
}

impl From<crate::kube::ApiError> for Error {
    fn from(e: crate::kube::ApiError) -> Error {
        Error::Api(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_host_device_core::error::Code;

    #[test]
    fn a_person_reads_what_failed_and_core_keeps_its_code() {
        let e: Error = CoreError::new(Code::NotAllowed, "eth9 is the uplink")
            .with_details("allowedUplinks")
            .into();
        assert_eq!(e.to_string(), "eth9 is the uplink: allowedUplinks");
        let e = e.context("pool rail");
        assert_eq!(e.core().map(|c| c.code), Some(Code::NotAllowed));
        assert_eq!(
            e.to_string(),
            "pool rail: eth9 is the uplink: allowedUplinks"
        );
        let n = failed("writing /var/run/cdi/x.json", "No space left on device").context("cdi");
        assert_eq!(
            n.to_string(),
            "cdi: writing /var/run/cdi/x.json: No space left on device"
        );
        assert!(n.core().is_none());
        assert_eq!(
            invalid("--resync-seconds must be at least 1").to_string(),
            "--resync-seconds must be at least 1"
        );
    }
}
