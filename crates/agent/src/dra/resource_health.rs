//! The kubelet's device health stream (KEP-4680): `NodeWatchResources` of
//! `v1.DRAResourceHealth` (and `v1alpha1`, the same on the wire), served on the DRA socket and
//! advertised in the registration, so the kubelet shows each prepared device's health in the
//! pod's `status.containerStatuses[].allocatedResourcesStatus`.
//!
//! The verdicts are the slice loop's (`slices::run` judges every published device with
//! `crate::health` and puts the result in a watch channel), so the taint and the
//! stream never disagree. Each stream sends the full report when it opens, again on every
//! change, and at least every [`RESEND`] (the kubelet forgets a device it has not heard of for
//! its timeout, [`TIMEOUT_SECONDS`]). Unhealthy devices carry the judge's sentence
//! (`link-down: net1 in the pod is up without carrier`); a device whose pod's netns could not
//! be looked at is `Unknown` with why.

use super::api;
use super::slices::DeviceHealth;
use crate::health::Health;
use futures::Stream;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tonic::Status;

/// The longest wait between two reports of one stream.
pub const RESEND: Duration = Duration::from_secs(10);
/// How long the kubelet keeps a device's health without hearing of it.
pub const TIMEOUT_SECONDS: i64 = 30;
/// What the kubelet shows of a message (it cuts longer ones).
const MAX_MESSAGE: usize = 1024;

pub type HealthStream =
    Pin<Box<dyn Stream<Item = Result<api::NodeWatchResourcesResponse, Status>> + Send>>;

/// One report of every device `now` holds.
pub fn response(now: &[DeviceHealth], at: SystemTime) -> api::NodeWatchResourcesResponse {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    api::NodeWatchResourcesResponse {
        devices: now
            .iter()
            .map(|d| api::DeviceHealth {
                device: Some(api::DeviceIdentifier {
                    pool_name: d.pool.clone(),
                    device_name: d.device.clone(),
                }),
                health: match d.health {
                    Health::Healthy => api::HEALTHY,
                    Health::Unknown(_) => api::UNKNOWN,
                    Health::Unhealthy { .. } => api::UNHEALTHY,
                },
                last_updated_time: secs,
                health_check_timeout_seconds: TIMEOUT_SECONDS,
                message: cut(d.health.message()),
            })
            .collect(),
    }
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_MESSAGE {
        let mut at = MAX_MESSAGE - 3;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
        s.push_str("...");
    }
    s
}

/// The stream one `NodeWatchResources` call gets: the report now, then on every change or
/// after [`RESEND`], until the verdicts' sender is gone.
pub fn watch(rx: watch::Receiver<Vec<DeviceHealth>>, resend: Duration) -> HealthStream {
    log::info!("the kubelet watches device health");
    Box::pin(futures::stream::unfold(
        (rx, true),
        move |(mut rx, first)| async move {
            if !first && let Ok(Err(_)) = tokio::time::timeout(resend, rx.changed()).await {
                return None;
            }
            let now = rx.borrow_and_update().clone();
            Some((Ok(response(&now, SystemTime::now())), (rx, false)))
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn dev(name: &str, health: Health) -> DeviceHealth {
        DeviceHealth {
            pool: "node-a".into(),
            device: name.into(),
            health,
        }
    }

    #[test]
    fn the_stream_reports_at_once_on_change_and_when_nothing_changed() {
        let rt = crate::async_rt::current_thread().unwrap();
        rt.block_on(async {
            let (tx, rx) = watch::channel(vec![dev("net-a", Health::Healthy)]);
            let resend = Duration::from_millis(400);
            let mut s = watch(rx, resend);
            let first = s.next().await.unwrap().unwrap();
            assert_eq!(first.devices.len(), 1);
            assert_eq!(first.devices[0].health, api::HEALTHY);
            assert_eq!(first.devices[0].health_check_timeout_seconds, 30);
            let d = first.devices[0].device.clone().unwrap();
            assert_eq!(
                (d.pool_name.as_str(), d.device_name.as_str()),
                ("node-a", "net-a")
            );
            tx.send_replace(vec![dev(
                "net-a",
                Health::Unhealthy {
                    word: "link-down",
                    why: "net1 in the pod is up without carrier".into(),
                },
            )]);
            let t = tokio::time::Instant::now();
            let next = s.next().await.unwrap().unwrap();
            assert!(t.elapsed() < resend / 2, "a change goes out at once");
            assert_eq!(next.devices[0].health, api::UNHEALTHY);
            assert_eq!(
                next.devices[0].message,
                "link-down: net1 in the pod is up without carrier"
            );
            // Nothing changes: the same report again after the resend period.
            let t = tokio::time::Instant::now();
            let again = s.next().await.unwrap().unwrap();
            assert!(t.elapsed() >= resend);
            let when = |r: &api::NodeWatchResourcesResponse| {
                r.devices
                    .iter()
                    .map(|d| api::DeviceHealth {
                        last_updated_time: 0,
                        ..d.clone()
                    })
                    .collect::<Vec<_>>()
            };
            assert_eq!(when(&again), when(&next), "the same, sent again");
            assert!(again.devices[0].last_updated_time >= next.devices[0].last_updated_time);
            tx.send_replace(vec![dev("net-a", Health::Unknown("netns gone".into()))]);
            let u = s.next().await.unwrap().unwrap();
            assert_eq!(
                (u.devices[0].health, u.devices[0].message.as_str()),
                (api::UNKNOWN, "netns gone")
            );
            drop(tx);
            assert!(s.next().await.is_none(), "the sender gone ends the stream");
        });
    }

    #[test]
    fn a_long_message_is_cut_as_the_kubelet_would() {
        let m = cut("é".repeat(800));
        assert!(m.len() <= MAX_MESSAGE && m.ends_with("..."), "{}", m.len());
        assert_eq!(cut("short".into()), "short");
    }
}
