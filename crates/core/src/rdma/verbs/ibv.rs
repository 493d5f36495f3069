//! The libibverbs path: libibverbs.so.1 loaded by us, on first use, through dlopen.
//!
//! Only the query path needs the library, and loading it (with libnl-3 and libnl-route-3, its
//! relocations and constructors) costs about 0.7 ms of CPU and 1.4 ms of wall time: a process
//! that loads it at start-up pays that on every DEL, VERSION and non-RDMA ADD too. So nothing
//! here is linked against it: [`lib`] opens it the first time a query asks, resolves the few
//! functions below, and keeps them for the life of the process. rdma-mummy-sys is used for the
//! ABI's types only; none of its functions is referenced, so its C wrappers (whose constructor
//! would dlopen the library at start-up) are not linked in.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::net::Ipv6Addr;
use std::sync::OnceLock;

use rdma_mummy_sys as sys;

use super::{
    DeviceReport, GidEntry, GidType, LinkLayer, PortInfo, PortState, Source, Transport, VerbsError,
    Verification,
};

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut sys::ibv_device;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut sys::ibv_device);
type GetDeviceName = unsafe extern "C" fn(*mut sys::ibv_device) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut sys::ibv_device) -> *mut sys::ibv_context;
type CloseDevice = unsafe extern "C" fn(*mut sys::ibv_context) -> c_int;
type QueryDevice = unsafe extern "C" fn(*mut sys::ibv_context, *mut sys::ibv_device_attr) -> c_int;
type QueryPort = unsafe extern "C" fn(*mut sys::ibv_context, u8, *mut sys::ibv_port_attr) -> c_int;
/// `_ibv_query_gid_table` (rdma-core 32+): context, entries, count, flags, entry size.
type QueryGidTable = unsafe extern "C" fn(
    *mut sys::ibv_context,
    *mut sys::ibv_gid_entry,
    usize,
    u32,
    usize,
) -> isize;
/// `_ibv_query_gid_ex` (rdma-core 32+): context, port, index, entry, flags, entry size.
type QueryGidEx = unsafe extern "C" fn(
    *mut sys::ibv_context,
    u32,
    u32,
    *mut sys::ibv_gid_entry,
    u32,
    usize,
) -> c_int;

/// The functions of libibverbs.so.1 this module calls (their exported, versioned-default
/// symbols; `ibv_query_port` is the 1.1 entry point that fills the port attributes' stable
/// prefix, which holds every field read here).
struct Lib {
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    open_device: OpenDevice,
    close_device: CloseDevice,
    query_device: QueryDevice,
    query_port: QueryPort,
    query_gid_table: Option<QueryGidTable>,
    query_gid_ex: Option<QueryGidEx>,
}

/// libibverbs, loaded on the first call (None when the node has no usable libibverbs.so.1).
fn lib() -> Option<&'static Lib> {
    static LIB: OnceLock<Option<Lib>> = OnceLock::new();
    LIB.get_or_init(load).as_ref()
}

fn load() -> Option<Lib> {
    // SAFETY: dlopen with a constant, NUL-terminated name; the handle is never closed, so the
    // function pointers taken from it stay valid for the life of the process.
    let handle = unsafe {
        libc::dlopen(
            c"libibverbs.so.1".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_LOCAL,
        )
    };
    if handle.is_null() {
        log::debug!("libibverbs.so.1 could not be loaded: the verbs path is unavailable");
        return None;
    }
    let sym = |name: &CStr| -> Option<*mut c_void> {
        // SAFETY: `handle` is a live handle and `name` NUL-terminated.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    // SAFETY (each transmute): the symbol is libibverbs' exported function of that name, whose
    // C signature the field's type spells out (rdma-core's verbs.h and verbs.c).
    unsafe {
        Some(Lib {
            get_device_list: std::mem::transmute::<*mut c_void, GetDeviceList>(sym(
                c"ibv_get_device_list",
            )?),
            free_device_list: std::mem::transmute::<*mut c_void, FreeDeviceList>(sym(
                c"ibv_free_device_list",
            )?),
            get_device_name: std::mem::transmute::<*mut c_void, GetDeviceName>(sym(
                c"ibv_get_device_name",
            )?),
            open_device: std::mem::transmute::<*mut c_void, OpenDevice>(sym(c"ibv_open_device")?),
            close_device: std::mem::transmute::<*mut c_void, CloseDevice>(sym(
                c"ibv_close_device",
            )?),
            query_device: std::mem::transmute::<*mut c_void, QueryDevice>(sym(
                c"ibv_query_device",
            )?),
            query_port: std::mem::transmute::<*mut c_void, QueryPort>(sym(c"ibv_query_port")?),
            query_gid_table: sym(c"_ibv_query_gid_table")
                .map(|p| std::mem::transmute::<*mut c_void, QueryGidTable>(p)),
            query_gid_ex: sym(c"_ibv_query_gid_ex")
                .map(|p| std::mem::transmute::<*mut c_void, QueryGidEx>(p)),
        })
    }
}

/// Whether libibverbs.so.1 can be used in this process: loads it on the first call (never at
/// start-up; see the module's header).
pub fn verbs_available() -> bool {
    lib().is_some()
}

/// The loaded library, or the error every query returns without it.
fn need() -> Result<&'static Lib, VerbsError> {
    lib().ok_or(VerbsError::NoLibrary)
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The result of `ibv_get_device_list`, freed on drop.
struct DeviceList {
    lib: &'static Lib,
    list: *mut *mut sys::ibv_device,
    len: usize,
}

impl DeviceList {
    fn get(lib: &'static Lib) -> Result<Self, VerbsError> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the list is owned by the returned guard.
        let list = unsafe { (lib.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(VerbsError::sys("ibv_get_device_list", last_errno()));
        }
        Ok(DeviceList {
            lib,
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
            let p = unsafe { (self.lib.get_device_name)(dev) };
            // SAFETY: non-NULL names are NUL-terminated strings inside the device struct.
            !p.is_null() && unsafe { CStr::from_ptr(p) }.to_bytes() == name.as_bytes()
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed exactly once.
        unsafe { (self.lib.free_device_list)(self.list) };
    }
}

/// An open device context, closed on drop. (Raw pointers keep both guards !Send: verbs are used
/// on the thread that sits in the pod netns.)
struct Context {
    lib: &'static Lib,
    ctx: *mut sys::ibv_context,
}

impl Context {
    fn open(lib: &'static Lib, dev: *mut sys::ibv_device) -> Result<Self, VerbsError> {
        // SAFETY: `dev` is a live entry of a device list that outlives this call.
        let ctx = unsafe { (lib.open_device)(dev) };
        if ctx.is_null() {
            return Err(VerbsError::sys("ibv_open_device", last_errno()));
        }
        Ok(Context { lib, ctx })
    }

    /// Port `port`'s attributes (`ibv_query_port`).
    fn port(&self, port: u8) -> Result<sys::ibv_port_attr, VerbsError> {
        // SAFETY: ibv_port_attr is plain old data; all-zero is a valid value.
        let mut pa: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and a valid out-pointer at least as large as the attributes'
        // stable prefix the 1.1 entry point fills.
        let rc = unsafe { (self.lib.query_port)(self.ctx, port, &mut pa) };
        if rc != 0 {
            return Err(VerbsError::sys("ibv_query_port", rc));
        }
        Ok(pa)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context came from ibv_open_device and is closed exactly once.
        let rc = unsafe { (self.lib.close_device)(self.ctx) };
        if rc != 0 {
            log::debug!("ibv_close_device returned {rc}");
        }
    }
}

/// Query `dev_name` through libibverbs, from the calling thread's netns.
pub fn query_device_verbs(dev_name: &str) -> Result<DeviceReport, VerbsError> {
    let lib = need()?;
    let list = DeviceList::get(lib)?;
    let Some(dev) = list.find(dev_name) else {
        return Err(VerbsError::DeviceNotVisible {
            device: dev_name.to_owned(),
        });
    };
    // SAFETY: `dev` points to a live `struct ibv_device` (public, stable ABI).
    let node_type = unsafe { (*dev).node_type };
    let transport = Transport::from_node_type(i64::from(node_type));
    // Declared after `list`, so it is closed before the list is freed.
    let ctx = Context::open(lib, dev)?;

    // SAFETY: ibv_device_attr is plain old data; all-zero is a valid value.
    let mut attr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx.0` is an open context and `attr` a valid out-pointer.
    let rc = unsafe { (lib.query_device)(ctx.ctx, &mut attr) };
    if rc != 0 {
        return Err(VerbsError::sys("ibv_query_device", rc));
    }

    let mut ports = Vec::with_capacity(usize::from(attr.phys_port_cnt));
    let mut table_len = 0usize;
    for port in 1..=attr.phys_port_cnt {
        let pa = ctx.port(port)?;
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
    let Some(query) = ctx.lib.query_gid_table else {
        return Err(VerbsError::sys("ibv_query_gid_table", libc::EOPNOTSUPP));
    };
    let mut entries = vec![zeroed_entry(); table_len];
    // SAFETY: `entries` holds `table_len` writable entries of the size passed.
    let n = unsafe {
        query(
            ctx.ctx,
            entries.as_mut_ptr(),
            table_len,
            0,
            std::mem::size_of::<sys::ibv_gid_entry>(),
        )
    };
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
    let Some(query) = ctx.lib.query_gid_ex else {
        return Err(VerbsError::sys("ibv_query_gid_ex", libc::EOPNOTSUPP));
    };
    let mut gids = Vec::new();
    for p in ports {
        let pa = ctx.port(u8::try_from(p.port).unwrap_or(u8::MAX))?;
        let len = u32::try_from(pa.gid_tbl_len).unwrap_or(0);
        for index in 0..len.min(u32::try_from(table_len).unwrap_or(u32::MAX)) {
            let mut e = zeroed_entry();
            // SAFETY: open context, valid out-pointer of the size passed.
            let rc = unsafe {
                query(
                    ctx.ctx,
                    p.port,
                    index,
                    &mut e,
                    0,
                    std::mem::size_of::<sys::ibv_gid_entry>(),
                )
            };
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
