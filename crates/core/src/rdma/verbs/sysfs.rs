//! The sysfs path: /sys/class/infiniband/DEV/ports/N/{state,link_layer,gids/I,
//! gid_attrs/types/I,gid_attrs/ndevs/I}, read from a sysfs mounted in the caller's netns.
//!
//! A sysfs mount shows the network namespace of the task that mounted it: the process's /sys is
//! the host's view (in exclusive RDMA netns mode it lacks the pod's device, and its class/net
//! lacks the pod's netdevs). [`with_own_sysfs`] therefore runs a closure on a helper thread that
//! joins the caller's netns, unshares its mount namespace (made recursively private, so nothing
//! propagates to the host) and mounts a fresh sysfs over /sys there (on top of a tmpfs: see
//! below). The mount namespace dies with the thread: nothing is left behind on the host, no
//! temporary directory to clean up, even if the process is killed mid-way.

use std::fs;
use std::io;
use std::net::Ipv6Addr;
use std::path::Path;

use std::os::fd::OwnedFd;

use nix::fcntl::{OFlag, open, openat};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::stat::Mode;
use nix::unistd::read;

use super::{
    DeviceReport, GidEntry, GidType, LinkLayer, PortInfo, PortState, Source, Transport, VerbsError,
    Verification,
};

/// Where the helper thread mounts its sysfs (inside its own, private mount namespace).
const PRIVATE_SYSFS: &str = "/sys";

/// Query `dev_name` from a fresh sysfs mounted in the calling thread's netns.
pub fn query_device_sysfs(dev_name: &str) -> Result<DeviceReport, VerbsError> {
    let dev = dev_name.to_owned();
    with_own_sysfs(move |root| query_device_sysfs_at(root, &dev))?
}

/// Run `f` on a helper thread that is in the calling thread's netns and has its own mount
/// namespace with a fresh sysfs; `f` gets that sysfs's root. Needs CAP_SYS_ADMIN.
pub fn with_own_sysfs<R, F>(f: F) -> Result<R, VerbsError>
where
    F: FnOnce(&Path) -> R + Send + 'static,
    R: Send + 'static,
{
    // The calling thread's netns (not the process's: the caller may have setns()'d this thread).
    let netns = fs::File::open("/proc/thread-self/ns/net")
        .map_err(|e| VerbsError::Io("open /proc/thread-self/ns/net".into(), e))?;
    let handle = std::thread::Builder::new()
        .name("rdma-sysfs".into())
        .spawn(move || -> Result<R, VerbsError> {
            setns(&netns, CloneFlags::CLONE_NEWNET)
                .map_err(|e| VerbsError::nix("setns(CLONE_NEWNET)", e))?;
            drop(netns);
            // Also unshares this thread's fs_struct, so nothing here touches the other threads.
            unshare(CloneFlags::CLONE_NEWNS)
                .map_err(|e| VerbsError::nix("unshare(CLONE_NEWNS)", e))?;
            mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .map_err(|e| VerbsError::nix("mount --make-rprivate /", e))?;
            // The kernel refuses (EBUSY) to mount a superblock over a mount of the same one, and
            // in init_net the fresh sysfs IS the host's /sys superblock: put a tmpfs in between.
            mount(
                Some("tmpfs"),
                PRIVATE_SYSFS,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some("size=4k,mode=0700"),
            )
            .map_err(|e| VerbsError::nix("mount tmpfs", e))?;
            mount(
                Some("sysfs"),
                PRIVATE_SYSFS,
                Some("sysfs"),
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                None::<&str>,
            )
            .map_err(|e| VerbsError::nix("mount sysfs", e))?;
            let out = f(Path::new(PRIVATE_SYSFS));
            for what in ["sysfs", "tmpfs"] {
                if let Err(e) = umount2(PRIVATE_SYSFS, MntFlags::MNT_DETACH) {
                    // Harmless: the mount namespace goes away with this thread.
                    log::debug!("umount of the private {what} failed: {e}");
                }
            }
            Ok(out)
        })
        .map_err(|e| VerbsError::Io("spawn the sysfs reader thread".into(), e))?;
    handle.join().unwrap_or_else(|_| {
        Err(VerbsError::Io(
            "sysfs reader thread".into(),
            io::Error::other("panicked"),
        ))
    })
}

/// Parse the RDMA device `dev_name` from a sysfs tree rooted at `root` (normally a sysfs mount
/// point; a fake tree in tests).
pub fn query_device_sysfs_at(root: &Path, dev_name: &str) -> Result<DeviceReport, VerbsError> {
    let not_visible = || VerbsError::DeviceNotVisible {
        device: dev_name.to_owned(),
    };
    if !is_plain_name(dev_name) {
        return Err(not_visible());
    }
    let dev_dir = root.join("class/infiniband").join(dev_name);
    match fs::metadata(&dev_dir) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(not_visible()),
        Err(e) => return Err(io_err(&dev_dir, e)),
    }
    let node_type = read_attr(&dev_dir.join("node_type"))?;
    let transport = Transport::from_node_type(leading_number(&node_type).unwrap_or(-1));

    let mut ports = Vec::new();
    let mut gids = Vec::new();
    for port in numbered_entries(&dev_dir.join("ports"))? {
        let port_dir = dev_dir.join("ports").join(port.to_string());
        let state_text = read_attr(&port_dir.join("state"))?;
        let state = leading_number(&state_text)
            .and_then(|n| u32::try_from(n).ok())
            .map_or(PortState::Other(u32::MAX), PortState::from_raw);
        let link_layer = LinkLayer::from_sysfs(&read_attr(&port_dir.join("link_layer"))?);
        ports.push(PortInfo {
            port,
            state,
            link_layer,
        });
        read_port_gids(root, &port_dir, port, link_layer, &mut gids)?;
    }

    Ok(DeviceReport {
        device: dev_name.to_owned(),
        transport,
        ports,
        gids,
        source: Source::Sysfs,
        verified: Verification::NotChecked,
    })
}

fn read_port_gids(
    root: &Path,
    port_dir: &Path,
    port: u32,
    link_layer: LinkLayer,
    out: &mut Vec<GidEntry>,
) -> Result<(), VerbsError> {
    let gids_path = port_dir.join("gids");
    let indexes = match numbered_entries(&gids_path) {
        Ok(v) => v,
        // A port without a GID table (not expected from the kernel): nothing to report.
        Err(VerbsError::Io(_, e)) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    // Tables are long (rxe: 1024 entries, nearly all empty): read entries relative to directory
    // fds, with one openat + read + close each, instead of resolving the full path every time.
    let gids_dir = open_dir(&gids_path)?;
    let types_path = port_dir.join("gid_attrs/types");
    let types_dir = open_dir(&types_path)?;
    let ndevs_dir = open_dir(&port_dir.join("gid_attrs/ndevs")).ok();
    for index in indexes {
        let name = index.to_string();
        let text = read_at(&gids_dir, &name).map_err(|e| io_err(&gids_path.join(&name), e))?;
        let gid: Ipv6Addr = text.parse().map_err(|_| {
            io_err(
                &gids_path.join(&name),
                io::Error::new(io::ErrorKind::InvalidData, format!("not a GID: {text:?}")),
            )
        })?;
        if gid.is_unspecified() {
            continue;
        }
        // The kernel answers EINVAL for an entry removed since we read the GID: skip it.
        let gid_type = match read_at(&types_dir, &name) {
            Ok(t) => GidType::from_sysfs(&t, link_layer),
            Err(e) => {
                log::debug!("skipping GID {gid} (port {port} index {index}): {e}");
                continue;
            }
        };
        // No netdev (IB GIDs) reads as an error too.
        let ndev_ifindex = ndevs_dir
            .as_ref()
            .and_then(|dir| read_at(dir, &name).ok())
            .and_then(|ndev| ifindex_of(root, &ndev));
        out.push(GidEntry {
            port,
            index,
            gid,
            gid_type,
            ndev_ifindex,
        });
    }
    Ok(())
}

fn open_dir(path: &Path) -> Result<OwnedFd, VerbsError> {
    open(
        path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(path, io::Error::from(e)))
}

/// A small attribute file `name` in `dir`, trimmed.
fn read_at(dir: &OwnedFd, name: &str) -> io::Result<String> {
    let fd = openat(dir, name, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())?;
    let mut buf = [0u8; 256];
    let mut len = 0;
    // A sysfs attribute comes whole in the first read; a short read means the end (one syscall
    // less than reading until 0, which counts over a 1024-entry table).
    loop {
        let want = buf.len() - len;
        let n = read(&fd, &mut buf[len..])?;
        len += n;
        if n == 0 || n < want || len == buf.len() {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&buf[..len]).trim().to_owned())
}

/// The ifindex of netdev `name` as this sysfs sees it (the mounter's netns).
fn ifindex_of(root: &Path, name: &str) -> Option<u32> {
    if !is_plain_name(name) {
        return None;
    }
    read_attr(&root.join("class/net").join(name).join("ifindex"))
        .ok()?
        .parse()
        .ok()
}

/// A single path component: no separators, not "." or "..".
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// "4: ACTIVE" -> 4, "1: CA" -> 1.
fn leading_number(text: &str) -> Option<i64> {
    text.split(':').next()?.trim().parse().ok()
}

/// The numeric names in `dir`, sorted.
fn numbered_entries(dir: &Path) -> Result<Vec<u32>, VerbsError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        if let Some(n) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn read_attr(path: &Path) -> Result<String, VerbsError> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|e| io_err(path, e))
}

fn io_err(path: &Path, e: io::Error) -> VerbsError {
    VerbsError::Io(format!("read {}", path.display()), e)
}
