//! The container engine as the daemon holds it: connected when first needed, and again after a
//! reload that changed its settings; its event watch; the worker image as the last cycle saw it.

use super::Connector;
use super::triggers::{self, Wakeups};
use crate::act::backend::{Backend, BackendError};
use crate::settings::EngineSettings;
use crate::worker::ImageState;
use std::future::Future;
use tokio::task::AbortHandle;

pub(super) struct Engine<B> {
    connect: Connector<B>,
    backend: Option<B>,
    /// The engine's event watch of `backend` (ended when the engine changes).
    events: Option<AbortHandle>,
    /// The worker image as the last cycle saw it (an urgent cycle plans with it).
    last_image: Option<ImageState>,
}

impl<B: Backend> Engine<B> {
    pub(super) fn new(connect: Connector<B>) -> Engine<B> {
        Engine {
            connect,
            backend: None,
            events: None,
            last_image: None,
        }
    }

    /// The engine client, connecting (and watching its events) when there is none.
    pub(super) fn client(
        &mut self,
        s: &EngineSettings,
        wakeups: &mut Wakeups,
    ) -> Result<B, BackendError> {
        if let Some(b) = &self.backend {
            return Ok(b.clone());
        }
        let b = (self.connect)(s)?;
        if let Some(old) = self.events.take() {
            old.abort();
        }
        let events = triggers::watch_workers(b.clone(), wakeups.sender());
        self.events = Some(wakeups.watch(events));
        self.backend = Some(b.clone());
        Ok(b)
    }

    pub(super) fn connected(&self) -> Option<B> {
        self.backend.clone()
    }

    /// The settings changed: the next cycle connects anew.
    pub(super) fn forget(&mut self) {
        self.backend = None;
    }

    /// The worker image for a plan: as the last cycle saw it when `urgent` (one engine request
    /// less before the owner's workers are paused), else as `ask` finds it.
    pub(super) async fn image(
        &mut self,
        urgent: bool,
        ask: impl Future<Output = ImageState>,
    ) -> ImageState {
        let seen = match self.last_image.clone() {
            Some(seen) if urgent => seen,
            _ => ask.await,
        };
        self.last_image = Some(seen.clone());
        seen
    }
}
