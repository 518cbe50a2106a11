use super::*;
use crate::network::names;
use std::net::Ipv4Addr;

fn filter() -> Filter {
    Filter::for_instance("t", vec![Ipv4Net::parse("10.20.0.0/16").unwrap()])
}

/// The table as iptables prints it with generation `g` of `f` whole, behind another
/// instance's jump and Docker's own rules.
fn whole(f: &Filter, g: u32) -> String {
    let mut s = String::from(
        "-P INPUT ACCEPT\n-P FORWARD DROP\n-N DOCKER\n-N DOCKER-USER\n-N PILOTD-0THER000-F1\n",
    );
    for hook in Hook::ALL {
        s.push_str(&format!("-N {}\n", f.chain_name(hook, g)));
    }
    s.push_str("-A INPUT -i pd-other -j PILOTD-0THER000-I1\n");
    s.push_str(&format!(
        "-A INPUT {}\n",
        f.jump(&f.chain_name(Hook::Input, g))
    ));
    s.push_str("-A INPUT -i lo -j ACCEPT\n-A FORWARD -j DOCKER-USER\n");
    s.push_str(&format!(
        "-A DOCKER-USER {}\n-A DOCKER-USER -j RETURN\n",
        f.jump(&f.chain_name(Hook::Forward, g))
    ));
    for hook in Hook::ALL {
        for r in f.chain_rules(hook, Refusal::Reject) {
            s.push_str(&format!("-A {} {r}\n", f.chain_name(hook, g)));
        }
    }
    s
}

#[test]
fn names_fit_the_kernels_and_iptables_limits() {
    let (net, ifname, chain) = names("a-very-long-instance-name-of-forty-chars");
    assert!(net.starts_with("pilotd-"));
    assert!(ifname.len() <= 15, "{ifname}");
    let f = Filter::for_instance("a-very-long-instance-name-of-forty-chars", vec![]);
    assert_eq!(f.chain, chain);
    assert!(f.chain_name(Hook::Forward, 999).len() <= 28);
    assert_ne!(names("a").1, names("b").1);
    assert!(f.owns(&f.chain_name(Hook::Input, 2)));
    assert!(
        f.owns(&format!("{chain}-FWD")),
        "the layout before generations"
    );
    assert!(!f.owns(&format!("{chain}X-F1")));
}

#[test]
fn allowed_destinations_come_before_refusals_and_everything_else_passes() {
    let f = filter();
    let fwd = f.chain_rules(Hook::Forward, Refusal::Reject);
    assert_eq!(
        fwd[0],
        "-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"
    );
    assert_eq!(fwd[1], "-d 10.20.0.0/16 -j RETURN");
    assert!(
        fwd.contains(&"-d 169.254.0.0/16 -j REJECT --reject-with icmp-port-unreachable".into())
    );
    assert!(
        fwd.contains(&"-d 192.168.0.0/16 -j REJECT --reject-with icmp-port-unreachable".into())
    );
    assert_eq!(
        fwd.last().unwrap(),
        "-j RETURN",
        "the internet stays reachable"
    );
    let input = f.chain_rules(Hook::Input, Refusal::Drop);
    assert_eq!(input.last().unwrap(), "-j DROP", "nothing new to the host");
    assert_eq!(f.jump("X"), format!("-i {} -j X", f.interface));
}

#[test]
fn the_hosts_private_resolvers_get_their_dns_port_for_forwarded_traffic_only() {
    let servers = [
        Ipv4Addr::new(192, 168, 1, 1),
        Ipv4Addr::new(8, 8, 8, 8),    // public: passes anyway
        Ipv4Addr::new(10, 20, 0, 53), // inside egress_allow already
        Ipv4Addr::new(192, 168, 1, 1),
    ];
    let host = [
        Ipv4Addr::new(192, 168, 1, 23),
        Ipv4Addr::new(192, 168, 1, 255),
    ];
    let f = filter().with_resolvers(&servers, &host);
    assert_eq!(f.resolvers, vec![Ipv4Addr::new(192, 168, 1, 1)]);
    let rules = f.chain_rules(Hook::Forward, Refusal::Reject);
    let dns: Vec<&String> = rules.iter().filter(|r| r.contains("--dport 53")).collect();
    assert_eq!(
        dns,
        [
            "-d 192.168.1.1/32 -p udp -m udp --dport 53 -j RETURN",
            "-d 192.168.1.1/32 -p tcp -m tcp --dport 53 -j RETURN"
        ]
    );
    let first_refusal = rules.iter().position(|r| r.contains("-j REJECT")).unwrap();
    assert!(rules.iter().position(|r| r.contains("--dport 53")).unwrap() < first_refusal);
    // The host itself: a resolver opens nothing there.
    let input = f.chain_rules(Hook::Input, Refusal::Reject);
    assert_eq!(input, filter().chain_rules(Hook::Input, Refusal::Reject));
    assert!(!input.iter().any(|r| r.contains("--dport 53")), "{input:?}");
    // A filter whose resolver changed is not the installed one: the check rebuilds it.
    let moved = filter().with_resolvers(&[Ipv4Addr::new(10, 1, 1, 1)], &host);
    let l = Listing::parse(&whole(&f, 1));
    assert_eq!(diagnose(&f, &l, None), Verdict::Intact { generation: 1 });
    assert!(matches!(diagnose(&moved, &l, None), Verdict::Damaged(_)));
}

/// A hostile DHCP server names the host itself as the resolver: its own LAN address,
/// libvirt's resolver on the host, a broadcast address, 0.0.0.0. None is opened.
#[test]
fn a_resolver_that_is_the_host_or_no_host_at_all_is_never_opened() {
    let lan = Ipv4Addr::new(192, 168, 1, 23);
    let libvirt = Ipv4Addr::new(192, 168, 122, 1);
    let host = [lan, Ipv4Addr::new(192, 168, 1, 255), libvirt];
    let named = [
        lan,
        libvirt,
        Ipv4Addr::new(192, 168, 1, 255),
        Ipv4Addr::BROADCAST,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::new(224, 0, 0, 251),
    ];
    let f = filter().with_resolvers(&named, &host);
    assert!(f.resolvers.is_empty(), "{:?}", f.resolvers);
    assert_eq!(f, filter());
    // The same addresses, not the host's: a router at .1 of another LAN is opened.
    let elsewhere = filter().with_resolvers(&named, &[]);
    assert_eq!(
        elsewhere.resolvers,
        vec![lan, Ipv4Addr::new(192, 168, 1, 255), libvirt]
    );
}

#[test]
fn a_whole_filter_is_intact_in_either_generation_behind_other_filters() {
    let f = filter();
    for g in [1, 2] {
        let l = Listing::parse(&whole(&f, g));
        assert_eq!(diagnose(&f, &l, None), Verdict::Intact { generation: g });
    }
    let dropping = whole(&f, 1).replace("-j REJECT --reject-with icmp-port-unreachable", "-j DROP");
    assert_eq!(
        diagnose(&f, &Listing::parse(&dropping), None),
        Verdict::Intact { generation: 1 }
    );
    assert_eq!(
        diagnose(&f, &Listing::parse("-N DOCKER-USER\n"), None),
        Verdict::Missing
    );
}

/// Every way the filter can be less than whole is told, with what is wrong.
#[test]
fn every_damage_is_found_and_named() {
    let f = filter();
    let base = whole(&f, 1);
    let (fwd, inp) = (f.chain_name(Hook::Forward, 1), f.chain_name(Hook::Input, 1));
    let fwd_jump = format!("-A DOCKER-USER {}\n", f.jump(&fwd));
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "jump gone (a firewall reload)",
            base.replace(&fwd_jump, ""),
            "DOCKER-USER no longer jumps",
        ),
        (
            "jump twice",
            base.replace(&fwd_jump, &format!("{fwd_jump}{fwd_jump}")),
            "2 times",
        ),
        (
            "jump for another interface",
            base.replace(&fwd_jump, &format!("-A DOCKER-USER -i eth0 -j {fwd}\n")),
            "not `-i",
        ),
        (
            "an accept before the jump",
            base.replace(
                &fwd_jump,
                &format!("-A DOCKER-USER -i {} -j ACCEPT\n{fwd_jump}", f.interface),
            ),
            "comes before DOCKER-USER",
        ),
        (
            "a rule deleted from a chain",
            base.replace(
                &format!("-A {fwd} -d 10.0.0.0/8 -j REJECT --reject-with icmp-port-unreachable\n"),
                "",
            ),
            "holds 12 rule(s), not its 13; rule 3 is `-d 172.16",
        ),
        (
            "a rule changed",
            base.replace(
                &format!("-A {inp} -j REJECT"),
                &format!("-A {inp} -j RETURN"),
            ),
            "rule 3 is `-j RETURN",
        ),
        (
            "a rule added",
            format!("{base}-A {inp} -j ACCEPT\n"),
            "holds 4 rule(s)",
        ),
        (
            "a leftover generation",
            base.replace(
                "-N DOCKER\n",
                &format!("-N DOCKER\n-N {}\n", f.chain_name(Hook::Forward, 2)),
            ),
            "is left over",
        ),
        (
            "the layout before generations",
            base.replace(&format!("-j {fwd}"), &format!("-j {}-FWD", f.chain))
                .replace(&format!("-N {fwd}"), &format!("-N {}-FWD", f.chain)),
            "an older layout",
        ),
        (
            "hooks into different generations",
            base.replace(
                &format!("-j {inp}"),
                &format!("-j {}", f.chain_name(Hook::Input, 2)),
            )
            .replace(
                &format!("-N {inp}"),
                &format!("-N {}", f.chain_name(Hook::Input, 2)),
            ),
            "INPUT jumps into generation 2, DOCKER-USER into 1",
        ),
    ];
    for (name, listing, want) in cases {
        match diagnose(&f, &Listing::parse(&listing), None) {
            Verdict::Damaged(why) => assert!(why.contains(want), "{name}: {why}"),
            v => panic!("{name}: {v:?}"),
        }
    }
    // A changed egress_allow is damage too: the chains hold the old list.
    let wider = Filter::for_instance("t", vec![]);
    assert!(matches!(
        diagnose(&wider, &Listing::parse(&base), None),
        Verdict::Damaged(_)
    ));
}

#[test]
fn what_iptables_printed_back_is_accepted_for_that_filter_only() {
    let f = filter();
    let (fwd, inp) = (f.chain_name(Hook::Forward, 1), f.chain_name(Hook::Input, 1));
    let odd = whole(&f, 1).replace(" --reject-with icmp-port-unreachable", " --reject-with x");
    let l = Listing::parse(&odd);
    assert!(matches!(diagnose(&f, &l, None), Verdict::Damaged(_)));
    let printed = Printed {
        filter: f.clone(),
        forward: l.rules_of(&fwd).map(str::to_string).collect(),
        input: l.rules_of(&inp).map(str::to_string).collect(),
    };
    assert_eq!(
        diagnose(&f, &l, Some(&printed)),
        Verdict::Intact { generation: 1 }
    );
    let other = Printed {
        filter: Filter::for_instance("t", vec![]),
        ..printed
    };
    assert!(matches!(
        diagnose(&f, &l, Some(&other)),
        Verdict::Damaged(_)
    ));
}

/// The rebuild's new generation is complete and hooked in before anything old goes.
#[test]
fn a_rebuild_swaps_in_a_full_new_generation_before_it_deletes_the_old_one() {
    let f = filter();
    let mut table = whole(&f, 1);
    // A reload left one jump; an older layout's chain and a stray jump into it remain.
    table = table.replace(
        &format!(
            "-A DOCKER-USER {}\n",
            f.jump(&f.chain_name(Hook::Forward, 1))
        ),
        "",
    );
    table.push_str(&format!("-N {0}-FWD\n-A FORWARD -j {0}-FWD\n", f.chain));
    let (script, g) = rebuild_script(&f, &Listing::parse(&table), Refusal::Reject);
    assert_eq!(g, 2, "the first generation no chain uses");
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(lines.first(), Some(&"*filter"));
    assert_eq!(lines.last(), Some(&"COMMIT"));
    let pos = |want: &str| {
        lines
            .iter()
            .position(|l| *l == want)
            .unwrap_or_else(|| panic!("`{want}` missing from:\n{script}"))
    };
    let (f2, i2) = (f.chain_name(Hook::Forward, 2), f.chain_name(Hook::Input, 2));
    let (f1, i1) = (f.chain_name(Hook::Forward, 1), f.chain_name(Hook::Input, 1));
    let last_rule = pos(&format!(
        "-A {i2} -j REJECT --reject-with icmp-port-unreachable"
    ));
    let new_jump = pos(&format!("-I DOCKER-USER 1 {}", f.jump(&f2)));
    let new_in = pos(&format!("-I INPUT 1 {}", f.jump(&i2)));
    assert!(pos(&format!(":{f2} - [0:0]")) < last_rule && last_rule < new_jump);
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with(&format!("-A {f2} ")))
            .count(),
        f.chain_rules(Hook::Forward, Refusal::Reject).len()
    );
    let first_removal = lines
        .iter()
        .position(|l| l.starts_with("-D") || l.starts_with("-F") || l.starts_with("-X"))
        .unwrap();
    assert!(
        new_jump < first_removal && new_in < first_removal,
        "{script}"
    );
    pos(&format!("-D INPUT {}", f.jump(&i1)));
    pos(&format!("-D FORWARD -j {}-FWD", f.chain));
    for old in [&f1, &i1, &format!("{}-FWD", f.chain)] {
        assert!(pos(&format!("-F {old}")) < pos(&format!("-X {old}")));
    }
    assert!(
        !script.contains("PILOTD-0THER000"),
        "never another instance's"
    );
    assert!(
        !script.contains("-A DOCKER-USER -j RETURN")
            && !script.contains("-D DOCKER-USER -j RETURN")
    );
}

#[test]
fn removal_takes_every_generation_and_nothing_else() {
    let f = filter();
    let script = removal_script(&f, &Listing::parse(&whole(&f, 2))).unwrap();
    assert_eq!(
        script.lines().filter(|l| l.starts_with("-D ")).count(),
        2,
        "{script}"
    );
    assert_eq!(script.lines().filter(|l| l.starts_with("-X ")).count(), 2);
    assert!(!script.contains("0THER"));
    assert_eq!(
        removal_script(&f, &Listing::parse("-N DOCKER-USER\n")),
        None
    );
}
