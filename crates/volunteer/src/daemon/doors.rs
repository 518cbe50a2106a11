//! The owner's two doors: the control socket (`pilotd snooze`, `resume`, `open`) and the
//! status page. Their servers are the daemon's own and end with the drain.

use super::triggers::{Trigger, Wakeups};
use crate::owner::control;
use crate::owner::page::{self, Doors};
use crate::owner::request;
use crate::settings::Settings;
use pilotd_core::service::listener::Stop;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

#[derive(Default)]
pub(super) struct OwnerDoors {
    /// What the servers carry the owner's requests out with (kept current across reloads);
    /// None before they are served.
    context: Option<watch::Sender<request::Context>>,
    /// The status page's invitations and sessions (shared with the control socket, which
    /// hands out the invitations).
    doors: Doors,
    /// The status page as served since start: its port, and whether pilotd holds it (None:
    /// `[page] port` unset, or not listening yet).
    page: Option<request::PageDoor>,
    servers: JoinSet<()>,
    stop: Stop,
}

impl OwnerDoors {
    /// Serves `pilotd snooze` and `resume` on the control socket, each request a wake-up. A
    /// socket that cannot be bound is logged and noted in the status; the daemon goes on
    /// without it (the owner's other protections do not depend on it). The status page (when
    /// `[page] port` is set) is served beside it, on 127.0.0.1; only a port pilotd holds is
    /// offered to `pilotd open` (`self.page`).
    pub(super) async fn open(&mut self, s: &Settings, wakeups: &mut Wakeups) {
        // The page first: whether pilotd holds its port decides what `pilotd open` answers.
        let mut listening = None;
        if let Some(port) = s.page_port {
            let served = match page::bind(port).await {
                Ok(listener) => {
                    listening = Some((port, listener));
                    Ok(Arc::new(self.doors.clone()) as Arc<dyn request::Invitations>)
                }
                Err(e) => {
                    tracing::error!(
                        "{e}; the status page is unavailable, and `pilotd open` sends no one to that port"
                    );
                    Err(e.cause())
                }
            };
            self.page = Some(request::PageDoor { port, served });
        }
        let (tx, rx) = watch::channel(context(s, &self.page));
        let (wake_tx, mut wake_rx) = mpsc::channel::<()>(4);
        let triggers = wakeups.sender();
        wakeups.watch(async move {
            while wake_rx.recv().await.is_some() {
                let _ = triggers.try_send(Trigger::Owner);
            }
        });
        let path = s.control_socket.clone();
        match control::bind(&path) {
            Ok(listener) => {
                self.servers.spawn(control::serve(
                    listener,
                    rx.clone(),
                    wake_tx.clone(),
                    self.stop.signal(),
                ));
                tracing::info!(socket = %path.display(), "taking snooze and resume on the control socket");
            }
            Err(e) => tracing::error!("{e}; `pilotd snooze`, `resume` and `open` are unavailable"),
        }
        if let Some((port, listener)) = listening {
            self.servers.spawn(page::serve(
                listener,
                port,
                self.doors.clone(),
                rx,
                wake_tx,
                self.stop.signal(),
            ));
            tracing::info!("status page on http://127.0.0.1:{port}/ (`pilotd open`)");
        }
        self.context = Some(tx);
    }

    /// The settings were reloaded (from `old` to `s`): the servers carry requests out with the
    /// new ones; the doors themselves stay where they are until a restart.
    pub(super) fn reloaded(&self, old: &Settings, s: &Settings) {
        if let Some(c) = &self.context {
            c.send_replace(context(s, &self.page));
        }
        if s.page_port != self.page.as_ref().map(|p| p.port) && self.context.is_some() {
            tracing::warn!(
                "reload: [page] port changed; the page is served as at start (and `pilotd open` sends browsers there) until a restart"
            );
        }
        if s.control_socket != old.control_socket {
            tracing::warn!(
                "reload: control_socket changed; the daemon listens on the new path only after a restart"
            );
        }
    }

    /// Ends the servers (their listeners closed) before their socket goes: a server still
    /// accepting would answer on a path that no longer exists.
    pub(super) async fn close(&mut self, s: &Settings) {
        self.stop.stop();
        let _ = tokio::time::timeout(Duration::from_secs(3), async {
            while self.servers.join_next().await.is_some() {}
        })
        .await;
        if self.context.is_some() {
            let _ = std::fs::remove_file(&s.control_socket);
        }
    }
}

/// What carrying out the owner's requests (on the socket or the page) needs of the settings,
/// and the page as pilotd serves it (`page`: the port it tried at start, and whether it holds
/// it; the page does not move on a reload).
fn context(s: &Settings, page: &Option<request::PageDoor>) -> request::Context {
    request::Context {
        state_dir: s.state_dir.clone(),
        policy: s.policy.clone(),
        page: page.clone(),
    }
}
