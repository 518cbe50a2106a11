//! pilotd's own bridge network for workers: made once, labelled, and never one pilotd did
//! not make.

use super::DockerBackend;
use crate::act::backend::{BackendError, Network};
use crate::worker::labels;
use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::InspectNetworkOptions;
use std::collections::HashMap;

impl Network for DockerBackend {
    async fn ensure_network(&self, name: &str, interface: &str) -> Result<(), BackendError> {
        let what = format!("pilotd's network {name}");
        match self
            .docker
            .inspect_network(name, None::<InspectNetworkOptions>)
            .await
        {
            Ok(n) => {
                let l = n.labels.unwrap_or_default();
                if l.get(labels::MANAGED).map(String::as_str) == Some("true")
                    && l.get(labels::INSTANCE) == Some(&self.instance)
                {
                    Ok(())
                } else {
                    Err(BackendError::Rejected {
                        what,
                        message: format!(
                            "a network named {name} exists and is not this pilotd's; pilotd \
                             never touches it: remove or rename it, or name another network in \
                             [worker] network"
                        ),
                    })
                }
            }
            Err(e) => match self.err(&what, e) {
                BackendError::NotFound { .. } => {
                    let body = NetworkCreateRequest {
                        name: name.to_string(),
                        driver: Some("bridge".into()),
                        // No traffic between workers; the interface name the filter matches.
                        options: Some(HashMap::from([
                            (
                                "com.docker.network.bridge.enable_icc".to_string(),
                                "false".to_string(),
                            ),
                            (
                                "com.docker.network.bridge.name".to_string(),
                                interface.to_string(),
                            ),
                        ])),
                        labels: Some(HashMap::from([
                            (labels::MANAGED.to_string(), "true".to_string()),
                            (labels::INSTANCE.to_string(), self.instance.clone()),
                        ])),
                        ..Default::default()
                    };
                    match self.docker.create_network(body).await {
                        Ok(_) => {
                            tracing::info!(
                                network = name,
                                interface,
                                "created pilotd's network for workers"
                            );
                            Ok(())
                        }
                        Err(e) => match self.err(format!("creating {what}"), e) {
                            // Created by a concurrent call in the meantime.
                            BackendError::Conflict { .. } => Ok(()),
                            other => Err(other),
                        },
                    }
                }
                other => Err(other),
            },
        }
    }
    async fn remove_network(&self, name: &str) -> Result<(), BackendError> {
        let asked = self.docker.remove_network(name).await;
        self.gone_is_done(format!("removing pilotd's network {name}"), asked)
    }
}
