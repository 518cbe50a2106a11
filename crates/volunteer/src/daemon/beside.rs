//! What runs beside the loop, started by `serve`: the watchers (utmp, logind, input devices,
//! firewalld; the engine's events are started with the engine, `backend`) and the owner's two
//! doors (the control socket and the status page). Every task is the daemon's own (`watchers`,
//! `owner_servers`) and ends with the drain.

use super::*;

impl<B: Backend> Daemon<B> {
    /// Serves until `shutdown` completes: the watchers beside the loop (utmp, logind, input
    /// devices, firewalld), the owner's doors, then the service skeleton's loop. Every task
    /// started here is the daemon's (`watchers`) and ends with the drain, so a loop driven
    /// in-process leaves nothing running behind it.
    pub async fn serve(
        &mut self,
        hooks: Hooks,
        shutdown: impl Future<Output = ()>,
        reloads: mpsc::Receiver<Reload>,
    ) {
        self.watchers.spawn(triggers::watch_utmp(
            self.s.probe.utmp.clone(),
            self.wakeups.tx.clone(),
        ));
        let tx = self.wakeups.tx.clone();
        self.watchers.spawn(crate::logind::watch(move |signal| {
            let t = match signal {
                Signal::Sessions => Trigger::Sessions,
                Signal::Sleep(going) => Trigger::Sleep(going),
            };
            // A sleep announcement must not be lost in a full channel: it changes the
            // decision. The send waits for room, and ends when the daemon (the receiver)
            // is gone.
            match tx.try_send(t) {
                Err(mpsc::error::TrySendError::Closed(_)) => false,
                Err(mpsc::error::TrySendError::Full(t @ Trigger::Sleep(_))) => {
                    let tx = tx.clone();
                    tokio::spawn(async move { tx.send(t).await });
                    true
                }
                _ => true,
            }
        }));
        // The machine's keyboards, mice and touchpads: the first input after a quiet spell as
        // long as `session_idle` is the owner coming back.
        let tx = self.wakeups.tx.clone();
        self.watchers.spawn(crate::input::watch(
            self.s.probe.dev.join("input"),
            input_sysfs(&self.s.probe.power_supply),
            self.input.clone(),
            move || {
                !matches!(
                    tx.try_send(Trigger::Input),
                    Err(mpsc::error::TrySendError::Closed(_))
                )
            },
        ));
        // A firewall reload firewalld announces is checked at once, not at the next cycle. The
        // guard is asked directly rather than through a trigger: the trigger channel is lent
        // to a running cycle, and a cycle may take a while to observe.
        let guard = self.work.egress.clone();
        self.watchers
            .spawn(egress::firewalld::watch(move |announced| {
                tracing::debug!(?announced, "firewalld");
                guard.reloaded();
                true
            }));
        self.listen_for_the_owner().await;
        lifecycle::serve(self, hooks, shutdown, reloads).await;
    }

    /// Serves `pilotd snooze` and `resume` on the control socket. A socket that cannot be
    /// bound is logged and noted in the status; the daemon goes on without it (the owner's
    /// other protections do not depend on it).
    /// The status page (when `[page] port` is set) is served beside it, on 127.0.0.1; only a
    /// port pilotd holds is offered to `pilotd open` (`self.page`).
    pub(super) async fn listen_for_the_owner(&mut self) {
        // The page first: whether pilotd holds its port decides what `pilotd open` answers.
        let page = match self.s.page_port {
            None => None,
            Some(port) => match page::bind(port).await {
                Ok(listener) => {
                    let invitations: Arc<dyn owner::Invitations> = Arc::new(self.doors.clone());
                    self.page = Some(owner::PageDoor {
                        port,
                        served: Ok(invitations),
                    });
                    Some((port, listener))
                }
                Err(e) => {
                    tracing::error!(
                        "{e}; the status page is unavailable, and `pilotd open` sends no one to that port"
                    );
                    self.page = Some(owner::PageDoor {
                        port,
                        served: Err(e.cause()),
                    });
                    None
                }
            },
        };
        let (tx, rx) = watch::channel(control_context(&self.s, &self.page));
        let (wake_tx, mut wake_rx) = mpsc::channel::<()>(4);
        let triggers = self.wakeups.tx.clone();
        self.watchers.spawn(async move {
            while wake_rx.recv().await.is_some() {
                let _ = triggers.try_send(Trigger::Owner);
            }
        });
        let path = self.s.control_socket.clone();
        match control::bind(&path) {
            Ok(listener) => {
                self.owner_servers.spawn(control::serve(
                    listener,
                    rx.clone(),
                    wake_tx.clone(),
                    self.owner_stop.signal(),
                ));
                tracing::info!(socket = %path.display(), "taking snooze and resume on the control socket");
            }
            Err(e) => tracing::error!("{e}; `pilotd snooze`, `resume` and `open` are unavailable"),
        }
        if let Some((port, listener)) = page {
            self.owner_servers.spawn(page::serve(
                listener,
                port,
                self.doors.clone(),
                rx,
                wake_tx,
                self.owner_stop.signal(),
            ));
            tracing::info!("status page on http://127.0.0.1:{port}/ (`pilotd open`)");
        }
        self.control = Some(tx);
    }
}

/// The kernel's class of input devices, beside the power supplies pilotd reads for the battery
/// (both are `/sys/class/...`; a test pointing one elsewhere points both).
pub(super) fn input_sysfs(power_supply: &Path) -> PathBuf {
    power_supply
        .parent()
        .unwrap_or(Path::new("/sys/class"))
        .join("input")
}

/// What carrying out the owner's requests (on the socket or the page) needs of the settings,
/// and the page as pilotd serves it (`page`: the port it tried at start, and whether it holds
/// it; the page does not move on a reload).
pub(super) fn control_context(s: &Settings, page: &Option<owner::PageDoor>) -> owner::Context {
    owner::Context {
        state_dir: s.state_dir.clone(),
        policy: s.policy.clone(),
        page: page.clone(),
    }
}
