//! Where a worker's traffic may go. Unless the site names a network of its own, workers sit
//! on pilotd's own bridge (`pilotd-<instance>`, interface `pd-<hash>`), with traffic between
//! containers off, and a filter that refuses whatever they send to the owner's side: private
//! and link-local addresses (the owner's LAN, the cloud metadata service at 169.254.169.254,
//! other containers' networks) and the host itself — except the destinations the site allows
//! (`[worker] egress_allow`, e.g. a pool's collector on a campus network). The internet stays
//! reachable: that is where the pool is.
//!
//! The rules (pure, `Filter::rules`) go into iptables as Docker's own do: a jump from
//! `DOCKER-USER` (forwarded traffic, evaluated before Docker's accept rules) and from `INPUT`
//! (traffic to the host's own addresses, e.g. the bridge's gateway) into chains of pilotd's
//! that only ever match this bridge's interface. `apply` installs them idempotently; when it
//! cannot, no worker starts (failing toward the owner).

pub use crate::config::units::Ipv4Net;
use std::process::Command;

/// What a worker may not reach unless allowed: the private ranges (RFC 1918), shared address
/// space (RFC 6598), link-local (RFC 3927, cloud metadata), "this network", IETF protocol
/// assignments, benchmarking, multicast and reserved space.
pub const REFUSED: [&str; 10] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "0.0.0.0/8",
    "192.0.0.0/24",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// pilotd's own network for one instance, and its filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// The Docker network's name.
    pub network: String,
    /// The bridge's interface (at most 15 characters, Linux's limit).
    pub interface: String,
    /// Base name of pilotd's chains (`<chain>-FWD`, `<chain>-IN`; at most 28 characters).
    pub chain: String,
    pub allow: Vec<Ipv4Net>,
}

/// The network, interface and chain names of an instance (pure).
pub fn names(instance: &str) -> (String, String, String) {
    use sha2::{Digest, Sha256};
    let hash: String = Sha256::digest(instance.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    (
        format!("pilotd-{instance}"),
        format!("pd-{hash}"),
        format!("PILOTD-{}", hash.to_uppercase()),
    )
}

impl Filter {
    pub fn for_instance(instance: &str, allow: Vec<Ipv4Net>) -> Filter {
        let (network, interface, chain) = names(instance);
        Filter {
            network,
            interface,
            chain,
            allow,
        }
    }

    fn forward_chain(&self) -> String {
        format!("{}-FWD", self.chain)
    }

    fn input_chain(&self) -> String {
        format!("{}-IN", self.chain)
    }

    /// The rules of pilotd's two chains, in order (pure). `reject` is the target for what is
    /// refused: `REJECT` answers at once, `DROP` where the kernel cannot reject.
    pub fn chain_rules(&self, reject: &str) -> Vec<(String, Vec<String>)> {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let mut out = Vec::new();
        // Both chains start alike: answers to what the outside asked are not new traffic, and
        // an allowed destination passes.
        let opening = |out: &mut Vec<(String, Vec<String>)>, chain: &str| {
            out.push((
                chain.to_string(),
                v(&[
                    "-m",
                    "conntrack",
                    "--ctstate",
                    "ESTABLISHED,RELATED",
                    "-j",
                    "RETURN",
                ]),
            ));
            for a in &self.allow {
                out.push((
                    chain.to_string(),
                    v(&["-d", &a.to_string(), "-j", "RETURN"]),
                ));
            }
        };
        let fwd = self.forward_chain();
        opening(&mut out, &fwd);
        for r in REFUSED {
            out.push((fwd.clone(), v(&["-d", r, "-j", reject])));
        }
        out.push((fwd, v(&["-j", "RETURN"])));
        // To the host itself: nothing new, except an allowed destination.
        let input = self.input_chain();
        opening(&mut out, &input);
        out.push((input, v(&["-j", reject])));
        out
    }

    /// The jumps into pilotd's chains: (built-in chain, rule), each matching only this
    /// bridge's traffic.
    pub fn jumps(&self) -> Vec<(String, Vec<String>)> {
        vec![
            (
                "DOCKER-USER".into(),
                vec![
                    "-i".into(),
                    self.interface.clone(),
                    "-j".into(),
                    self.forward_chain(),
                ],
            ),
            (
                "INPUT".into(),
                vec![
                    "-i".into(),
                    self.interface.clone(),
                    "-j".into(),
                    self.input_chain(),
                ],
            ),
        ]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error(
        "cannot filter the workers' traffic: `iptables {args}` failed: {message}\n  hint: pilotd \
         needs the iptables program and CAP_NET_ADMIN for its own network; until then no worker \
         starts. A site that filters traffic itself can name a network in [worker] network."
    )]
    Iptables { args: String, message: String },
}

/// Runs `iptables -w ARGS`; Ok(true) on success, Ok(false) when it exits 1 (a `-C` check that
/// found no such rule).
fn iptables(args: &[String]) -> Result<bool, EgressError> {
    let fail = |message: String| EgressError::Iptables {
        args: args.join(" "),
        message,
    };
    let out = Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| fail(e.to_string()))?;
    match out.status.code() {
        Some(0) => Ok(true),
        Some(1) if args.first().map(String::as_str) == Some("-C") => Ok(false),
        _ => Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )),
    }
}

/// Installs (or repairs) the filter: pilotd's chains are rebuilt whole, then each jump is
/// added unless it is there. Idempotent; never touches a rule that is not pilotd's.
pub fn apply(f: &Filter) -> Result<(), EgressError> {
    let s = |x: &str| x.to_string();
    for chain in [f.forward_chain(), f.input_chain()] {
        // -N fails when the chain exists already; -F then empties it either way.
        let _ = iptables(&[s("-N"), chain.clone()]);
        iptables(&[s("-F"), chain])?;
    }
    let reject = if iptables(&[
        s("-A"),
        f.input_chain(),
        s("-d"),
        s("240.0.0.0/4"),
        s("-j"),
        s("REJECT"),
    ])
    .is_ok()
    {
        iptables(&[s("-F"), f.input_chain()])?;
        "REJECT"
    } else {
        "DROP"
    };
    for (chain, rule) in f.chain_rules(reject) {
        let mut args = vec![s("-A"), chain];
        args.extend(rule);
        iptables(&args)?;
    }
    for (chain, rule) in f.jumps() {
        let mut check = vec![s("-C"), chain.clone()];
        check.extend(rule.iter().cloned());
        if !iptables(&check)? {
            let mut insert = vec![s("-I"), chain, s("1")];
            insert.extend(rule);
            iptables(&insert)?;
        }
    }
    Ok(())
}

/// Removes the filter (the jumps, then pilotd's chains); what is already gone is fine.
pub fn remove(f: &Filter) {
    for (chain, rule) in f.jumps() {
        let mut delete = vec!["-D".to_string(), chain];
        delete.extend(rule);
        while iptables(&delete).is_ok() {}
    }
    for chain in [f.forward_chain(), f.input_chain()] {
        let _ = iptables(&["-F".to_string(), chain.clone()]);
        let _ = iptables(&["-X".to_string(), chain]);
    }
}

/// Whether the filter is in place (both jumps present); errors read as "not in place".
pub fn in_place(f: &Filter) -> bool {
    f.jumps().into_iter().all(|(chain, rule)| {
        let mut check = vec!["-C".to_string(), chain];
        check.extend(rule);
        iptables(&check).unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_kernels_and_iptables_limits() {
        let (net, ifname, chain) = names("a-very-long-instance-name-of-forty-chars");
        assert!(net.starts_with("pilotd-"));
        assert!(ifname.len() <= 15, "{ifname}");
        assert!(chain.len() + "-FWD".len() <= 28, "{chain}");
        assert_ne!(names("a").1, names("b").1);
    }

    #[test]
    fn allowed_destinations_come_before_refusals_and_everything_else_passes() {
        let f = Filter::for_instance("t", vec![Ipv4Net::parse("10.20.0.0/16").unwrap()]);
        let rules = f.chain_rules("REJECT");
        let fwd: Vec<String> = rules
            .iter()
            .filter(|(c, _)| c.ends_with("-FWD"))
            .map(|(_, r)| r.join(" "))
            .collect();
        assert_eq!(
            fwd[0],
            "-m conntrack --ctstate ESTABLISHED,RELATED -j RETURN"
        );
        assert_eq!(fwd[1], "-d 10.20.0.0/16 -j RETURN");
        assert!(fwd.contains(&"-d 169.254.0.0/16 -j REJECT".to_string()));
        assert!(fwd.contains(&"-d 192.168.0.0/16 -j REJECT".to_string()));
        assert_eq!(
            fwd.last().unwrap(),
            "-j RETURN",
            "the internet stays reachable"
        );
        let input: Vec<String> = rules
            .iter()
            .filter(|(c, _)| c.ends_with("-IN"))
            .map(|(_, r)| r.join(" "))
            .collect();
        assert_eq!(
            input.last().unwrap(),
            "-j REJECT",
            "nothing new to the host"
        );
        for (chain, rule) in f.jumps() {
            assert!(chain == "DOCKER-USER" || chain == "INPUT");
            assert_eq!(&rule[..2], ["-i".to_string(), f.interface.clone()]);
        }
    }
}
