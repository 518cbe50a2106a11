//! Where a worker's traffic may go: pilotd's own bridge and the filter that guards it.

pub mod firewalld;
mod guard;
mod iptables;
mod link;
pub(crate) mod resolvers;

pub use guard::Guard;
pub use iptables::{Ensured, ensure, list, remove};
pub(crate) use pilotd_core::config::units::Ipv4Net;

use crate::network::Filter;
pub(crate) use pilotd_core::config::units::REFUSED;

/// Where the filter hooks in: forwarded traffic (`DOCKER-USER`) and traffic to the host itself
/// (`INPUT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hook {
    Forward,
    Input,
}

impl Hook {
    pub(crate) const ALL: [Hook; 2] = [Hook::Forward, Hook::Input];

    /// The built-in (or Docker's) chain that jumps into pilotd's.
    pub(crate) fn builtin(self) -> &'static str {
        match self {
            Hook::Forward => "DOCKER-USER",
            Hook::Input => "INPUT",
        }
    }

    fn letter(self) -> char {
        match self {
            Hook::Forward => 'F',
            Hook::Input => 'I',
        }
    }
}

/// How a refused packet is refused: answered at once (`REJECT`), or dropped where the kernel
/// cannot reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Reject,
    Drop,
}

impl Refusal {
    /// The target, spelled as `iptables -S` prints it (the default answer named), so that
    /// what is written and what is read back compare as text.
    fn target(self) -> &'static str {
        match self {
            Refusal::Reject => "-j REJECT --reject-with icmp-port-unreachable",
            Refusal::Drop => "-j DROP",
        }
    }
}

impl Filter {
    /// This filter with `servers`' DNS port open: those the filter would refuse and the
    /// allowlist does not already let through, each once; never one of `host` (the host's own
    /// addresses and broadcast addresses, `resolvers::host_addresses`), a broadcast or
    /// multicast address, or 0.0.0.0 (pure).
    pub(crate) fn with_resolvers(
        mut self,
        servers: &[std::net::Ipv4Addr],
        host: &[std::net::Ipv4Addr],
    ) -> Filter {
        let mut open: Vec<std::net::Ipv4Addr> = servers
            .iter()
            .copied()
            .filter(|a| {
                !(a.is_unspecified() || a.is_broadcast() || a.is_multicast() || host.contains(a))
            })
            .filter(|a| Ipv4Net::refused(*a) && !self.allow.iter().any(|n| n.contains(*a)))
            .collect();
        open.sort();
        open.dedup();
        self.resolvers = open;
        self
    }

    /// Whether `chain` is one of this filter's, of any generation (and the `-FWD`/`-IN`
    /// chains of pilotd before generations).
    pub(crate) fn owns(&self, chain: &str) -> bool {
        chain
            .strip_prefix(self.chain.as_str())
            .is_some_and(|rest| rest.starts_with('-'))
    }

    /// pilotd's chain for `hook` in generation `generation`.
    pub(crate) fn chain_name(&self, hook: Hook, generation: u32) -> String {
        format!("{}-{}{generation}", self.chain, hook.letter())
    }

    /// The generation a chain of this filter's for `hook` belongs to.
    fn generation_of(&self, hook: Hook, chain: &str) -> Option<u32> {
        chain
            .strip_prefix(self.chain.as_str())?
            .strip_prefix('-')?
            .strip_prefix(hook.letter())?
            .parse()
            .ok()
            .filter(|g| *g > 0)
    }

    /// The rules of pilotd's chain for `hook`, in order, each as `iptables -S` prints it
    /// after `-A <chain> ` (pure).
    pub(crate) fn chain_rules(&self, hook: Hook, refusal: Refusal) -> Vec<String> {
        // Both chains start alike: answers to what the outside asked are not new traffic,
        // and an allowed destination passes.
        let mut out = vec!["-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN".to_string()];
        out.extend(self.allow.iter().map(|a| format!("-d {a} -j RETURN")));
        match hook {
            Hook::Forward => {
                // The resolvers' DNS port, to other hosts only: what reaches the host itself
                // goes through INPUT, which opens none.
                for r in &self.resolvers {
                    for proto in ["udp", "tcp"] {
                        out.push(format!(
                            "-d {r}/32 -p {proto} -m {proto} --dport 53 -j RETURN"
                        ));
                    }
                }
                out.extend(
                    REFUSED
                        .iter()
                        .map(|r| format!("-d {r} {}", refusal.target())),
                );
                // The internet stays reachable.
                out.push("-j RETURN".into());
            }
            // To the host itself: nothing new, except an allowed destination.
            Hook::Input => out.push(refusal.target().into()),
        }
        out
    }

    /// The jump from `hook`'s built-in chain into `chain`, matching only this bridge's
    /// traffic, as `iptables -S` prints it after `-A <built-in> `.
    pub(crate) fn jump(&self, chain: &str) -> String {
        format!("-i {} -j {chain}", self.interface)
    }
}

/// The filter table as `iptables -S` prints it: its user-defined chains and every rule, in
/// order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    chains: Vec<String>,
    /// (chain, the rule after `-A <chain> `).
    rules: Vec<(String, String)>,
}

impl Listing {
    pub(crate) fn parse(text: &str) -> Listing {
        let mut l = Listing::default();
        for line in text.lines() {
            let mut parts = line.trim().splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("-N"), Some(chain), None) => l.chains.push(chain.to_string()),
                (Some("-A"), Some(chain), Some(rule)) => {
                    l.rules.push((chain.to_string(), rule.to_string()))
                }
                _ => {}
            }
        }
        l
    }

    fn rules_of<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.rules
            .iter()
            .filter(move |(c, _)| c == chain)
            .map(|(_, r)| r.as_str())
    }

    /// This filter's chains, of every generation.
    fn owned<'a>(&'a self, f: &'a Filter) -> impl Iterator<Item = &'a String> + 'a {
        self.chains.iter().filter(|c| f.owns(c))
    }
}

/// Where a rule jumps or goes to.
fn target(rule: &str) -> Option<&str> {
    let mut words = rule.split_whitespace();
    while let Some(w) = words.next() {
        if matches!(w, "-j" | "--jump" | "-g" | "--goto") {
            return words.next();
        }
    }
    None
}

/// What pilotd's chains hold, hook by hook, when iptables prints them differently than
/// `Filter::chain_rules` spells them (another iptables version): learned from reading back
/// a generation pilotd had just written, for that filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Printed {
    pub filter: Filter,
    pub forward: Vec<String>,
    pub input: Vec<String>,
}

/// Whether the filter is whole, and in which generation; or what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Intact {
        generation: u32,
    },
    /// Nothing of this filter is there at all (never installed, or flushed with everything).
    Missing,
    Damaged(String),
}

/// Judges the filter table against what `f` must be (pure). Whole means: each hook's
/// built-in chain jumps into this filter exactly once, by the rule `Filter::jump` spells,
/// with nothing before it but other pilotd filters' jumps (which match other bridges only);
/// both jumps lead to the same generation; its two chains hold exactly their rules (as
/// `chain_rules` spells them for either refusal, or as `printed` learned); and no other
/// chain of this filter is left.
pub(crate) fn diagnose(f: &Filter, l: &Listing, printed: Option<&Printed>) -> Verdict {
    if l.owned(f).next().is_none() {
        return Verdict::Missing;
    }
    let mut generation = None;
    for hook in Hook::ALL {
        let builtin = hook.builtin();
        let rules: Vec<&str> = l.rules_of(builtin).collect();
        let ours: Vec<usize> = (0..rules.len())
            .filter(|i| target(rules[*i]).is_some_and(|t| f.owns(t)))
            .collect();
        let at = match ours[..] {
            [] => return Verdict::Damaged(format!("{builtin} no longer jumps into the filter")),
            [at] => at,
            _ => {
                return Verdict::Damaged(format!(
                    "{builtin} jumps into the filter {} times",
                    ours.len()
                ));
            }
        };
        let to = target(rules[at]).unwrap_or_default();
        if rules[at] != f.jump(to) {
            return Verdict::Damaged(format!(
                "{builtin}'s jump into the filter is `{}`, not `{}`",
                rules[at],
                f.jump(to)
            ));
        }
        if let Some(before) = rules[..at]
            .iter()
            .find(|r| !target(r).is_some_and(|t| t.starts_with("PILOTD-")))
        {
            return Verdict::Damaged(format!(
                "a rule comes before {builtin}'s jump into the filter: `{before}`"
            ));
        }
        match (f.generation_of(hook, to), generation) {
            (None, _) => {
                return Verdict::Damaged(format!("{builtin} jumps into {to}, an older layout"));
            }
            (Some(g), Some(other)) if g != other => {
                return Verdict::Damaged(format!(
                    "{builtin} jumps into generation {g}, {} into {other}",
                    Hook::Forward.builtin()
                ));
            }
            (Some(g), _) => generation = Some(g),
        }
    }
    let Some(g) = generation else {
        return Verdict::Damaged("no generation".into());
    };
    let current = [f.chain_name(Hook::Forward, g), f.chain_name(Hook::Input, g)];
    if let Some(left) = l.owned(f).find(|c| !current.contains(c)) {
        return Verdict::Damaged(format!("{left} is left over"));
    }
    for hook in Hook::ALL {
        let chain = f.chain_name(hook, g);
        let have: Vec<&str> = l.rules_of(&chain).collect();
        let learned = printed.filter(|p| &p.filter == f).map(|p| match hook {
            Hook::Forward => p.forward.clone(),
            Hook::Input => p.input.clone(),
        });
        let whole = [Refusal::Reject, Refusal::Drop]
            .into_iter()
            .map(|r| f.chain_rules(hook, r))
            .chain(learned)
            .any(|want| want == have);
        if !whole {
            let want = f.chain_rules(hook, Refusal::Reject);
            let at = (0..)
                .find(|i| have.get(*i).copied() != want.get(*i).map(String::as_str))
                .unwrap_or(0);
            return Verdict::Damaged(format!(
                "{chain} holds {} rule(s), not its {}; rule {} is `{}`",
                have.len(),
                want.len(),
                at + 1,
                have.get(at).copied().unwrap_or("(none)")
            ));
        }
    }
    Verdict::Intact { generation: g }
}

/// The `iptables-restore --noflush` input that replaces whatever of `f` is in `l` by a new
/// generation, and that generation (pure). In one transaction: the new chains are created and
/// filled, their jumps go first in the built-in chains, and only then are the old jumps
/// (every rule leading into an old chain of this filter) and the old chains deleted. The
/// kernel commits it whole, so a worker's packet meets either the old filter or the new one,
/// never none.
pub(crate) fn rebuild_script(f: &Filter, l: &Listing, refusal: Refusal) -> (String, u32) {
    let old: Vec<&String> = l.owned(f).collect();
    let generation = (1u32..)
        .find(|g| {
            Hook::ALL
                .iter()
                .all(|h| !old.contains(&&f.chain_name(*h, *g)))
        })
        .unwrap_or(1);
    let mut s = String::from("*filter\n");
    for hook in Hook::ALL {
        s.push_str(&format!(":{} - [0:0]\n", f.chain_name(hook, generation)));
    }
    for hook in Hook::ALL {
        let chain = f.chain_name(hook, generation);
        for rule in f.chain_rules(hook, refusal) {
            s.push_str(&format!("-A {chain} {rule}\n"));
        }
    }
    for hook in Hook::ALL {
        let chain = f.chain_name(hook, generation);
        s.push_str(&format!("-I {} 1 {}\n", hook.builtin(), f.jump(&chain)));
    }
    s.push_str(&retire(f, l));
    s.push_str("COMMIT\n");
    (s, generation)
}

/// The `iptables-restore --noflush` input that removes every trace of `f` (pure); `None`
/// when there is none.
pub(crate) fn removal_script(f: &Filter, l: &Listing) -> Option<String> {
    let gone = retire(f, l);
    (!gone.is_empty()).then(|| format!("*filter\n{gone}COMMIT\n"))
}

/// Deletes the rules that lead into this filter's chains listed in `l` (from chains not its
/// own), then those chains.
fn retire(f: &Filter, l: &Listing) -> String {
    let mut s = String::new();
    for (chain, rule) in &l.rules {
        if !f.owns(chain) && target(rule).is_some_and(|t| f.owns(t)) {
            s.push_str(&format!("-D {chain} {rule}\n"));
        }
    }
    for chain in l.owned(f) {
        // Flushed first: nf_tables refuses to delete a chain that still holds rules, even in
        // the transaction that empties it.
        s.push_str(&format!("-F {chain}\n-X {chain}\n"));
    }
    s
}

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error(
        "cannot filter the workers' traffic: `iptables {args}` failed: {message}\n  hint: pilotd \
         needs the iptables program and CAP_NET_ADMIN for its own network; until then no worker \
         runs. A site that filters traffic itself can name a network in [worker] network."
    )]
    Iptables { args: String, message: String },
    #[error(
        "cannot filter the workers' traffic: `iptables-restore --noflush` refused pilotd's \
         rules: {message}\n  hint: pilotd needs iptables-restore, CAP_NET_ADMIN and Docker's \
         DOCKER-USER chain; until then no worker runs"
    )]
    Restore { message: String },
    #[error(
        "the workers' traffic filter is still not whole after a rebuild: {why}\n  hint: another \
         program is changing the filter table as pilotd writes it (a firewall manager?); until \
         it stops, no worker runs"
    )]
    NotRestored { why: String },
}

#[cfg(test)]
mod tests;
