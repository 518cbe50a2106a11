//! The checks of pilotd.toml that serde cannot express, each reported at its key's position
//! (FILE:LINE:COL) with what to write instead. `validate` runs them in a fixed order: the
//! order in which `check` lists the errors.

use super::values::proxy_url;
use super::values::{
    beyond_loopback, check_image_pattern, image_allowed, is_env_name, is_fully_qualified,
    secure_url, valid_instance,
};
use super::{Mode, PROXY_ENV, SiteConfig, WorkerUser};
use crate::config::diag::Diagnostics;
use crate::config::template;
use std::time::Duration;

impl SiteConfig {
    /// Semantic checks of pilotd.toml on its own.
    /// What `check` says without refusing the file: (span, message, hint).
    pub fn warnings(&self) -> Vec<(std::ops::Range<usize>, String, &'static str)> {
        let mut w = Vec::new();
        if let Some(listen) = &self.metrics.listen
            && beyond_loopback(listen.get_ref().ip())
        {
            w.push((
                listen.span(),
                format!(
                    "[metrics] listen = \"{}\" serves the metrics beyond loopback: anyone who can reach it reads what this machine does and when, and can hold the listener's 16 connections",
                    listen.get_ref()
                ),
                "listen on 127.0.0.1 (a scraper on this machine, or an SSH tunnel), or keep this address and let a firewall admit only the scraper",
            ));
        }
        if let Some(on) = &self.slot_ad.contribution
            && *on.get_ref()
            && self.remote.url.is_none()
            && !self
                .worker
                .env
                .values()
                .any(|v| v.get_ref().contains("{ad_file}"))
        {
            w.push((
                on.span(),
                "[slot_ad] contribution = true, but no [worker.env] value passes {ad_file} to the workers: no pilot publishes the file, so the pool sees none of it".into(),
                "add PILOT_AD_FILE = \"{ad_file}\" to [worker.env] (docs/site.md, \"The fleet in the pool\"), or remove the key",
            ));
        }
        w
    }

    pub(crate) fn validate(&self, d: &mut Diagnostics) {
        self.validate_daemon(d);
        self.validate_image(d);
        self.validate_log(d);
        self.validate_worker(d);
        self.validate_lifetime(d);
        self.validate_mode(d);
    }

    /// The remote manifest's URL, the history's threshold, the cycle's interval.
    fn validate_daemon(&self, d: &mut Diagnostics) {
        if let Some(url) = &self.remote.url
            && let Err(e) = secure_url(url.get_ref())
        {
            d.error(
                url.span(),
                format!("remote manifest URL: {e}"),
                "use an https:// URL (plain http is accepted only on loopback)",
            );
        }
        if !(0.0..=1.0).contains(&self.history.free_threshold) {
            d.error(
                0..0,
                "[history] free_threshold must be between 0 and 1",
                "e.g. free_threshold = 0.8",
            );
        }
        if self.interval.0 < Duration::from_secs(1) {
            d.error(
                0..0,
                "interval must be at least 1s",
                "e.g. interval = \"30s\"",
            );
        }
        if self.splay.get_ref().0 > super::MAX_SPLAY {
            d.error(
                self.splay.span(),
                "splay must be at most 1h: a host's first start waits up to the splay",
                "e.g. splay = \"5m\" (\"0s\" turns the fleet's spread off)",
            );
        }
    }

    /// `[worker] image` and the `allowed_images` patterns it must match.
    fn validate_image(&self, d: &mut Diagnostics) {
        let img = self.worker.image.get_ref();
        if !is_fully_qualified(img) {
            d.error(
                self.worker.image.span(),
                format!("worker image `{img}` is not fully qualified"),
                "name the registry, repository and tag, e.g. \"hub.opensciencegrid.org/osg-htc/ospool-ep:25-release\"",
            );
        } else if !image_allowed(img, &self.allowed_images()) {
            d.error(
                self.worker.image.span(),
                format!("worker image `{img}` is not in allowed_images"),
                "add a matching pattern to [worker] allowed_images, e.g. \"registry.example.org/pool/*\"",
            );
        }
        for p in &self.worker.allowed_images {
            if let Err(e) = check_image_pattern(p.get_ref()) {
                d.error(
                    p.span(),
                    format!("[worker] allowed_images: {e}"),
                    "write an exact reference, \"registry/path/*\" (every repository under that path) or \"registry/path/name:*\" (every tag and digest of one repository)",
                );
            }
        }
    }

    fn validate_log(&self, d: &mut Diagnostics) {
        if let Some(level) = &self.log.level
            // The daemon's filter (`service::logging`): levels and target=level directives.
            && let Err(e) = level
                .get_ref()
                .parse::<tracing_subscriber::filter::Targets>()
        {
            d.error(
                level.span(),
                format!("[log] level `{}` is not a log filter: {e}", level.get_ref()),
                "write a level (error, warn, info, debug, trace) or directives like \"info,pilotd=debug\"",
            );
        }
    }

    fn validate_lifetime(&self, d: &mut Diagnostics) {
        if self.max_lifetime().is_zero() {
            d.error(
                self.worker.max_lifetime.span(),
                "max_lifetime cannot be 0",
                "e.g. max_lifetime = \"24h\"",
            );
        }
    }

    /// `mode = "kubernetes"` needs its table; what is in it is the mode's to check.
    fn validate_mode(&self, d: &mut Diagnostics) {
        if self.kubernetes.is_none() && self.mode == Mode::Kubernetes {
            d.error(
                0..0,
                "mode = \"kubernetes\" needs a [kubernetes] table",
                "convert the provisioner's INI with `pilotd import-ini FILE`, or add [kubernetes] namespace = \"...\"",
            );
        }
    }

    /// Checks of `[docker]` and `[worker]` that serde cannot express.
    pub(super) fn validate_worker(&self, d: &mut Diagnostics) {
        self.validate_worker_identity(d);
        self.validate_worker_env(d);
        self.validate_worker_proxy(d);
        self.validate_worker_limits(d);
    }

    /// `[worker] http_proxy`, `https_proxy`, `no_proxy`: a proxy is an http(s) URL of a host
    /// workers can reach, carrying no password (every job reads its environment), and set in
    /// one place only.
    fn validate_worker_proxy(&self, d: &mut Diagnostics) {
        let w = &self.worker;
        for (key, v) in w.proxies() {
            let raw = v.get_ref().trim();
            let names = PROXY_ENV.iter().find(|(k, _)| *k == key).map(|(_, n)| *n);
            if let Some(twin) = names.into_iter().flatten().find(|n| w.env.contains_key(*n)) {
                d.error(
                    v.span(),
                    format!("[worker] {key} is also set as [worker.env] {twin}"),
                    format!("set it once: keep [worker] {key} and remove {twin} from [worker.env]"),
                );
            }
            if key == "no_proxy" {
                if raw.chars().any(|c| c.is_whitespace() && c != ' ') || raw.contains('=') {
                    d.error(
                        v.span(),
                        "[worker] no_proxy is a comma-separated list of hosts, domains and networks",
                        "e.g. no_proxy = \"localhost,.campus.example.org,10.0.0.0/8\"",
                    );
                }
                continue;
            }
            if let Err(why) = proxy_url(raw, &self.worker_egress_allows()) {
                d.error(v.span(), format!("[worker] {key}: {why}"), why.hint());
            }
        }
    }

    /// The private networks workers may reach: `egress_allow` on pilotd's own network;
    /// everything on a network the site names (its own filter applies).
    fn worker_egress_allows(&self) -> Option<Vec<crate::config::units::Ipv4Net>> {
        self.worker.network.is_none().then(|| {
            self.worker
                .egress_allow
                .iter()
                .filter_map(|a| crate::config::units::Ipv4Net::parse(a.get_ref()).ok())
                .collect()
        })
    }

    /// Where the worker runs and as whom: egress networks, user, instance, network.
    fn validate_worker_identity(&self, d: &mut Diagnostics) {
        for a in &self.worker.egress_allow {
            if let Err(e) = crate::config::units::Ipv4Net::parse(a.get_ref()) {
                d.error(
                    a.span(),
                    format!("[worker] egress_allow: {e}"),
                    "write IPv4 networks like \"10.20.0.0/16\" or single addresses like \"192.168.1.5\"",
                );
            }
        }
        if let Some(user) = &self.worker.user
            && let Err(e) = WorkerUser::parse(user.get_ref())
        {
            d.error(
                user.span(),
                e,
                "write the numeric ids the image runs as, e.g. user = \"1000:1000\" for the OSPool EP image, or user = \"image\" to keep the image's own (the scratch dir then stays root's)",
            );
        }
        let inst = &self.docker.instance;
        if !valid_instance(inst.get_ref()) {
            d.error(
                inst.span(),
                format!(
                    "instance `{}` cannot be part of a container name",
                    inst.get_ref()
                ),
                "use 1 to 40 of a-z, 0-9, '-' and '_', starting with a letter or digit",
            );
        }
        if let Some(net) = &self.worker.network {
            let n = net.get_ref().trim();
            if n == "host" || n.starts_with("container:") || n.is_empty() {
                d.error(
                    net.span(),
                    format!("[worker] network = \"{n}\" would put jobs past every filter (in the host's or another container's network)"),
                    "remove the key (pilotd's own filtered bridge), or name a network the site filters itself, e.g. network = \"bridge\"",
                );
            }
        }
    }

    /// `[worker.env]`: its names, and its values' templates.
    fn validate_worker_env(&self, d: &mut Diagnostics) {
        for (key, value) in &self.worker.env {
            if !is_env_name(key) {
                d.error(
                    value.span(),
                    format!(
                        "[worker.env] key `{}` is not an environment variable name",
                        key.escape_debug()
                    ),
                    "names are letters, digits and '_', not starting with a digit, e.g. NUM_CPUS",
                );
            }
        }
        for value in self.worker.env.values() {
            if let Err(e) = template::check(value.get_ref()) {
                // +1: the span starts at the opening quote.
                let at = value.span().start + 1 + e.offset();
                d.error(
                    at..at,
                    format!("[worker.env]: {e}"),
                    format!(
                        "known placeholders: {}; write {{{{ and }}}} for literal braces",
                        template::PLACEHOLDERS.join(", ")
                    ),
                );
            }
        }
    }

    /// Starts per cycle, pids, back-off, and the paths inside the worker.
    fn validate_worker_limits(&self, d: &mut Diagnostics) {
        if self.worker.max_starts_per_cycle == 0 {
            d.error(
                0..0,
                "[worker] max_starts_per_cycle = 0 would never start a worker",
                "e.g. max_starts_per_cycle = 1",
            );
        }
        if self.worker.pids_limit < 16 {
            d.error(
                0..0,
                "[worker] pids_limit is below 16: the worker could not even start condor",
                "e.g. pids_limit = 4096",
            );
        }
        if self.worker.backoff_base.0.is_zero()
            || self.worker.backoff_max < self.worker.backoff_base
        {
            d.error(
                0..0,
                "[worker] backoff_base must be > 0 and at most backoff_max",
                "e.g. backoff_base = \"1m\", backoff_max = \"1h\"",
            );
        }
        for (key, path) in [
            ("token_mount", &self.worker.token_mount),
            ("scratch_mount", &self.worker.scratch_mount),
        ] {
            if !path.is_absolute() {
                d.error(
                    0..0,
                    format!(
                        "[worker] {key} `{}` is not an absolute path",
                        path.display()
                    ),
                    "paths inside the worker start with /",
                );
            }
        }
    }
}
