//! Our sockets in the kubelet's directories, and their supervision: each created 0600 (its
//! directory 0750 where missing), served ([`super::serve`]), and watched every tick. A socket
//! someone removed (the kubelet deletes every socket of its device-plugins directory when it
//! restarts) or a server that stopped: every socket of the plugin is created and served anew,
//! and the plugin registers again (a fresh [`Registrar`]).

use super::{Dialled, Service};
use futures::future::BoxFuture;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What identifies a file across delete-and-recreate (inode numbers are reused).
pub type FileId = Option<(u64, i64, i64)>;

/// The identity of the file at `p` now; `None` when there is none.
pub fn identity(p: &Path) -> FileId {
    let m = std::fs::symlink_metadata(p).ok()?;
    Some((m.ino(), m.ctime(), m.ctime_nsec()))
}

/// One of our gRPC servers on its socket.
pub struct Served {
    path: PathBuf,
    id: FileId,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Served {
    /// Serve `svc` on a fresh socket at `at`: its directory made (0750) where missing, a stale
    /// socket removed, and only root (the kubelet) let in: 0600 from the moment it exists.
    pub fn start(at: &Path, svc: Service, dialled: Dialled) -> std::io::Result<Served> {
        if let Some(dir) = at.parent() {
            rdma_host_device_core::files::create_dirs(dir, 0o750)?;
        }
        let _ = std::fs::remove_file(at);
        let listener = rdma_host_device_core::files::listen_unix(at, 0o600).and_then(|l| {
            l.set_nonblocking(true)?;
            tokio::net::UnixListener::from_std(l)
        })?;
        let id = identity(at);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = super::serve(listener, svc, dialled, async {
            let _ = stopped.await;
        });
        Ok(Served {
            path: at.to_owned(),
            id,
            stop,
            task,
        })
    }

    /// Whether its socket is gone or another file stands at its path.
    pub fn removed(&self) -> bool {
        identity(&self.path) != self.id
    }

    /// Whether its server stopped.
    pub fn stopped(&self) -> bool {
        self.task.is_finished()
    }

    pub async fn shut(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// How the kubelet learns of a plugin whose sockets are served: asked every tick, a new one
/// for each time the sockets are served anew.
pub trait Registrar: Send {
    /// Register, if the kubelet needs it now.
    fn tick(&mut self) -> BoxFuture<'_, ()>;
}

/// The kubelet finds the plugin by itself (its plugin watcher reads `plugins_registry/`,
/// where one of the plugin's sockets serves `registration::PluginWatcher`): nothing to call.
pub struct Found;

impl Registrar for Found {
    fn tick(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// One of a plugin's sockets: where it is, what it serves, and how the kubelet's client of
/// it names it.
pub struct Endpoint {
    pub path: PathBuf,
    pub service: Service,
    pub dialled: Dialled,
}

/// A kubelet plugin: its services, each on its socket (served in this order: the kubelet
/// dials the first as soon as it learns of the last), and who it is in the log.
pub struct Plugin {
    pub name: String,
    pub sockets: Vec<Endpoint>,
    /// How often the sockets are checked and the registrar asked.
    pub tick: Duration,
}

/// Serve `plugin` and keep it registered (`registrar` makes a registrar per round), forever.
pub async fn supervise<R: Registrar>(plugin: Plugin, mut registrar: impl FnMut() -> R + Send) {
    let what = &plugin.name;
    'round: loop {
        let mut served: Vec<Served> = Vec::new();
        for e in &plugin.sockets {
            let at = &e.path;
            match Served::start(at, e.service.clone(), e.dialled) {
                Ok(s) => served.push(s),
                Err(e) => {
                    log::error!(
                        "{what}: cannot serve on {}: {e}; retrying in 1 s",
                        at.display()
                    );
                    for s in served {
                        s.shut().await;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue 'round;
                }
            }
        }
        log::info!(
            "{what}: serving on {}",
            served
                .iter()
                .map(|s| s.path.display().to_string())
                .collect::<Vec<_>>()
                .join(" and ")
        );
        let mut registrar = registrar();
        loop {
            if let Some(s) = served.iter().find(|s| s.removed()) {
                log::info!(
                    "{what}: {} was removed (the kubelet restarted?); serving anew",
                    s.path.display()
                );
                break;
            }
            if served.iter().any(Served::stopped) {
                log::error!("{what}: a gRPC server stopped; starting it again");
                break;
            }
            registrar.tick().await;
            tokio::time::sleep(plugin.tick).await;
        }
        for s in served {
            s.shut().await;
        }
    }
}
