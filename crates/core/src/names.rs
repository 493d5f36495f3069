//! The names a CNI call gives an attachment, checked as the spec and the kernel read them, and
//! the pod it is for: the attachment record (`state`) is keyed by them and keeps them, so both
//! programs read them by these rules (the plugin's `cni::env` takes them from the runtime).

use crate::error::{Result, invalid_env};

/// The Kubernetes pod an attachment is for, as CNI_ARGS names it (`K8S_POD_NAMESPACE`,
/// `K8S_POD_NAME`, `K8S_POD_UID`: what kubelet's CRI runtimes pass). Kept in the state record
/// for the metrics exporter's labels; never used to decide anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// The spec's rule for container IDs and network names: `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`. It
/// also keeps them safe to use in file names.
pub fn is_spec_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A DNS label as Kubernetes reads one (RFC 1123): 1-63 lower-case letters, digits and '-',
/// starting and ending with a letter or digit.
pub(crate) fn is_dns_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && l.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

/// A DNS subdomain as Kubernetes reads one: DNS labels joined by '.', `max` bytes at most (253
/// for a whole name; less where the name is a part of a longer one).
pub fn is_dns_subdomain(s: &str, max: usize) -> bool {
    s.len() <= max && s.split('.').all(is_dns_label)
}

pub fn validate_container_id(id: &str) -> Result<()> {
    if is_spec_name(id) {
        Ok(())
    } else {
        Err(invalid_env(format!(
            "CNI_CONTAINERID {} must start with a letter or digit and hold only letters, digits, '_', '.', '-'",
            crate::logging::shown(id)
        )))
    }
}

/// A valid Linux interface name: 1-15 bytes, not "." or "..", no '/', ':' or whitespace as
/// the kernel reads it (`dev_valid_name`: byte by byte, and its `isspace` takes the Latin-1
/// no-break space, byte 0xa0, for a space: "nà" is `n`, 0xc3, 0xa0), nor '%' or a control
/// character. Checked before anything moves: the kernel would refuse it only at the rename,
/// after the NIC had gone into the pod.
pub fn validate_ifname(name: &str) -> std::result::Result<(), String> {
    use crate::logging::shown;
    if name.is_empty() {
        return Err("interface name is empty".into());
    }
    if name.len() > 15 {
        return Err(format!(
            "interface name {} is {} bytes; Linux allows at most 15",
            shown(name),
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("interface name {} is not allowed", shown(name)));
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '/' | ':' | '%') || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "interface name {} contains {c:?}, which Linux does not allow",
            shown(name)
        ));
    }
    // The kernel's isspace: ' ', \t, \n, \v, \f, \r, and 0xa0 (lib/ctype.c).
    if let Some(c) = name.chars().find(|c| {
        let mut b = [0; 4];
        c.encode_utf8(&mut b)
            .bytes()
            .any(|b| matches!(b, b' ' | b'\t'..=b'\r' | 0xa0))
    }) {
        return Err(format!(
            "interface name {} contains {c:?}, whose UTF-8 holds byte 0xa0, which Linux reads as a space",
            shown(name)
        ));
    }
    Ok(())
}
