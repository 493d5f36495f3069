//! The libibverbs path, through rdma-mummy-sys.
//!
//! rdma-mummy-sys dlopens libibverbs.so.1 from a C constructor at program start; when that fails
//! every wrapper returns NULL / EOPNOTSUPP and nothing says why. [`verbs_available`] asks the
//! dynamic loader whether the library is mapped (RTLD_NOLOAD) to tell "no library" from
//! "no devices".

use std::ffi::{CStr, c_int};
use std::net::Ipv6Addr;

use rdma_mummy_sys as sys;

use super::{
    DeviceReport, GidEntry, GidType, LinkLayer, PortInfo, PortState, Source, Transport, VerbsError,
    Verification,
};

/// Whether libibverbs.so.1 is loaded in this process (rdma-mummy-sys loads it at start-up if it
/// can). Never loads anything itself.
pub fn verbs_available() -> bool {
    // SAFETY: with RTLD_NOLOAD, dlopen only looks up an object that is already mapped (no
    // constructors run); a non-NULL handle just takes a reference, released right below.
    let handle = unsafe {
        libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_NOLOAD | libc::RTLD_NOW,
        )
    };
    if handle.is_null() {
        return false;
    }
    // SAFETY: `handle` came from a successful dlopen and is released exactly once.
    unsafe { libc::dlclose(handle) };
    true
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The result of `ibv_get_device_list`, freed on drop.
struct DeviceList {
    list: *mut *mut sys::ibv_device,
    len: usize,
}

impl DeviceList {
    fn get() -> Result<Self, VerbsError> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the list is owned by the returned guard.
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(VerbsError::sys("ibv_get_device_list", last_errno()));
        }
        Ok(DeviceList {
            list,
            len: usize::try_from(n).unwrap_or(0),
        })
    }

    fn devices(&self) -> impl Iterator<Item = *mut sys::ibv_device> + '_ {
        // SAFETY: libibverbs returns an array of `n` valid device pointers (plus a NULL
        // terminator) that lives until ibv_free_device_list, i.e. as long as `self`.
        (0..self.len)
            .map(|i| unsafe { *self.list.add(i) })
            .take_while(|d| !d.is_null())
    }

    fn find(&self, name: &str) -> Option<*mut sys::ibv_device> {
        self.devices().find(|&dev| {
            // SAFETY: `dev` is a live device of this list; the returned string lives with it.
            let p = unsafe { sys::ibv_get_device_name(dev) };
            // SAFETY: non-NULL names are NUL-terminated strings inside the device struct.
            !p.is_null() && unsafe { CStr::from_ptr(p) }.to_bytes() == name.as_bytes()
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed exactly once.
        unsafe { sys::ibv_free_device_list(self.list) };
    }
}

/// An open device context, closed on drop. (Raw pointers keep both guards !Send: verbs are used
/// on the thread that sits in the pod netns.)
struct Context(*mut sys::ibv_context);

impl Context {
    fn open(dev: *mut sys::ibv_device) -> Result<Self, VerbsError> {
        // SAFETY: `dev` is a live entry of a device list that outlives this call.
        let ctx = unsafe { sys::ibv_open_device(dev) };
        if ctx.is_null() {
            return Err(VerbsError::sys("ibv_open_device", last_errno()));
        }
        Ok(Context(ctx))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context came from ibv_open_device and is closed exactly once.
        let rc = unsafe { sys::ibv_close_device(self.0) };
        if rc != 0 {
            log::debug!("ibv_close_device returned {rc}");
        }
    }
}

/// Query `dev_name` through libibverbs, from the calling thread's netns.
pub fn query_device_verbs(dev_name: &str) -> Result<DeviceReport, VerbsError> {
    if !verbs_available() {
        return Err(VerbsError::NoLibrary);
    }
    let list = DeviceList::get()?;
    let Some(dev) = list.find(dev_name) else {
        return Err(VerbsError::DeviceNotVisible {
            device: dev_name.to_owned(),
        });
    };
    // SAFETY: `dev` points to a live `struct ibv_device` (public, stable ABI).
    let node_type = unsafe { (*dev).node_type };
    let transport = Transport::from_node_type(i64::from(node_type));
    // Declared after `list`, so it is closed before the list is freed.
    let ctx = Context::open(dev)?;

    // SAFETY: ibv_device_attr is plain old data; all-zero is a valid value.
    let mut attr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx.0` is an open context and `attr` a valid out-pointer.
    let rc = unsafe { sys::ibv_query_device(ctx.0, &mut attr) };
    if rc != 0 {
        return Err(VerbsError::sys("ibv_query_device", rc));
    }

    let mut ports = Vec::with_capacity(usize::from(attr.phys_port_cnt));
    let mut table_len = 0usize;
    for port in 1..=attr.phys_port_cnt {
        // SAFETY: ibv_port_attr is plain old data; all-zero is a valid value.
        let mut pa: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx.0` is an open context and `pa` a valid out-pointer of the size the
        // wrapper passes along.
        let rc = unsafe { sys::ibv_query_port(ctx.0, port, &mut pa) };
        if rc != 0 {
            return Err(VerbsError::sys("ibv_query_port", rc));
        }
        table_len += usize::try_from(pa.gid_tbl_len).unwrap_or(0);
        ports.push(PortInfo {
            port: u32::from(port),
            state: PortState::from_raw(pa.state),
            link_layer: LinkLayer::from_verbs(pa.link_layer),
        });
    }

    let mut gids = match query_gid_table(&ctx, table_len) {
        Err(VerbsError::Sys { errno, .. }) if errno == libc::EOPNOTSUPP => {
            // An older libibverbs without ibv_query_gid_table: one entry at a time.
            query_gids_one_by_one(&ctx, &ports, table_len)?
        }
        other => other?,
    };
    gids.sort_by_key(|g| (g.port, g.index));

    Ok(DeviceReport {
        device: dev_name.to_owned(),
        transport,
        ports,
        gids,
        source: Source::Verbs,
        verified: Verification::NotChecked,
    })
}

fn zeroed_entry() -> sys::ibv_gid_entry {
    sys::ibv_gid_entry {
        gid: sys::ibv_gid { raw: [0; 16] },
        gid_index: 0,
        port_num: 0,
        gid_type: 0,
        ndev_ifindex: 0,
    }
}

/// Converts a kernel entry; None for an all-zero (unused) GID.
fn to_entry(e: &sys::ibv_gid_entry) -> Option<GidEntry> {
    // SAFETY: every bit pattern of the 16-byte union is a valid `[u8; 16]`.
    let raw = unsafe { e.gid.raw };
    let gid = Ipv6Addr::from(raw);
    if gid.is_unspecified() {
        return None;
    }
    Some(GidEntry {
        port: e.port_num,
        index: e.gid_index,
        gid,
        gid_type: GidType::from_verbs(e.gid_type),
        ndev_ifindex: (e.ndev_ifindex != 0).then_some(e.ndev_ifindex),
    })
}

fn query_gid_table(ctx: &Context, table_len: usize) -> Result<Vec<GidEntry>, VerbsError> {
    if table_len == 0 {
        return Ok(Vec::new());
    }
    let mut entries = vec![zeroed_entry(); table_len];
    // SAFETY: `entries` holds `table_len` writable entries; the wrapper passes their size.
    let n = unsafe { sys::ibv_query_gid_table(ctx.0, entries.as_mut_ptr(), table_len, 0) };
    if n < 0 {
        let errno = i32::try_from(-n).unwrap_or(libc::EIO);
        return Err(VerbsError::sys("ibv_query_gid_table", errno));
    }
    let n = usize::try_from(n).unwrap_or(0).min(table_len);
    Ok(entries[..n].iter().filter_map(to_entry).collect())
}

fn query_gids_one_by_one(
    ctx: &Context,
    ports: &[PortInfo],
    table_len: usize,
) -> Result<Vec<GidEntry>, VerbsError> {
    let mut gids = Vec::new();
    for p in ports {
        // SAFETY: see `query_device_verbs`.
        let mut pa: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        let port_u8 = u8::try_from(p.port).unwrap_or(u8::MAX);
        // SAFETY: open context, valid out-pointer.
        let rc = unsafe { sys::ibv_query_port(ctx.0, port_u8, &mut pa) };
        if rc != 0 {
            return Err(VerbsError::sys("ibv_query_port", rc));
        }
        let len = u32::try_from(pa.gid_tbl_len).unwrap_or(0);
        for index in 0..len.min(u32::try_from(table_len).unwrap_or(u32::MAX)) {
            let mut e = zeroed_entry();
            // SAFETY: open context, valid out-pointer; the wrapper passes the entry size.
            let rc = unsafe { sys::ibv_query_gid_ex(ctx.0, p.port, index, &mut e, 0) };
            match rc {
                0 => gids.extend(to_entry(&e)),
                // Unused entries answer ENODATA (EINVAL on some kernels).
                libc::ENODATA | libc::EINVAL => {}
                errno => return Err(VerbsError::sys("ibv_query_gid_ex", errno)),
            }
        }
    }
    Ok(gids)
}
