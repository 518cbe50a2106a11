//! `pilotd init`: asks the owner a few plain questions (`volunteer::owner::questions`) and writes a
//! commented policy.toml, then shows the resulting week. Works interactively, with piped
//! answers (one per line; an empty line takes the default), or with `--yes` and flags for
//! scripted installs. The file is validated by the same parser `check` uses before it is
//! written, so init never writes a policy pilotd would refuse.

use super::CmdError;
use crate::cli::{Global, InitArgs};
use chrono::Utc;
use pilotd_core::config::{self, SiteFile};
use pilotd_volunteer::decide::policy::schedule;
use pilotd_volunteer::inspect;
use pilotd_volunteer::owner::questions::{self, AnswerError, Answers};
use std::path::{Path, PathBuf};

/// Answers the questions the command line answered.
fn apply_flags(mut a: Answers, args: &InitArgs) -> Result<Answers, CmdError> {
    let flags = [
        ("when", &args.when),
        ("sessions", &args.sessions),
        ("cpus", &args.cpus),
        ("memory", &args.memory),
        ("longest-job", &args.longest_job),
        ("on-return", &args.on_return),
        ("on-metered", &args.on_metered),
        ("max-temperature", &args.max_temperature),
        ("max-fan", &args.max_fan),
        ("timezone", &args.timezone),
        ("media", &args.media),
    ];
    for (name, value) in flags {
        if let Some(v) = value {
            a.set(name, v)
                .map_err(|e| CmdError::Usage(format!("--{name} {v}: {e}")))?;
        }
    }
    Ok(a)
}

pub fn run(g: &Global, args: &InitArgs) -> Result<String, CmdError> {
    let (site, _) = config::load_site(&g.config, SiteFile::Optional, super::MODES)?;
    let path: PathBuf = args
        .output
        .clone()
        .or_else(|| g.policy.clone())
        .unwrap_or_else(|| site.policy.clone());
    if path.exists() && !args.force {
        return Err(CmdError::Usage(format!(
            "{} exists; pass --force to replace it (the old file is kept as {}.bak)",
            path.display(),
            path.display()
        )));
    }
    let a = apply_flags(Answers::defaults(&config::local_timezone()), args)?;
    let a = if args.yes {
        a
    } else {
        let stdin = std::io::stdin();
        let mut out = std::io::stderr();
        questions::ask(a, &mut stdin.lock(), &mut out, false).map_err(|e| match e {
            AnswerError::EndOfInput => CmdError::Usage(e.to_string()),
            e => CmdError::Runtime(e.to_string()),
        })?
    };
    let text = a.render(Utc::now().date_naive());
    let parse = |text: &str| {
        let machine = pilotd_volunteer::observe::host::this_machine();
        config::parse_policy(&path, text, &site, machine, config::local_timezone())
    };
    // Never write a file `check` would refuse.
    let policy = parse(&text)?;
    // The policy being replaced, to compare with: read before it is overwritten. One that
    // does not parse any more has nothing to compare.
    let current = std::fs::read_to_string(&path).ok().map(|old| parse(&old));
    write_policy(&path, &text)?;
    let now = Utc::now();
    let mut out = format!("wrote {}\n\n", path.display());
    out.push_str(&schedule::text(
        &policy,
        now,
        7,
        &path.display().to_string(),
    ));
    // The ledger's CPU was measured under the policy in force until now, when there was one.
    let running = match &current {
        Some(Ok(old)) => old,
        _ => &policy,
    };
    let mut week = |title: &str, p, running| {
        out.push_str(title);
        for line in inspect::expected_week(&site, p, running, now) {
            out.push_str(&format!("  {line}\n"));
        }
    };
    week(
        "\nwhat this policy is expected to give per week:\n",
        &policy,
        running,
    );
    match &current {
        Some(Ok(old)) => week(
            "the policy it replaced (kept as .bak) would give:\n",
            old,
            old,
        ),
        Some(Err(_)) => out.push_str(
            "the policy it replaced (kept as .bak) is not valid any more: nothing to compare\n",
        ),
        None => {}
    }
    Ok(out)
}

/// Atomic write (temp file + rename) with mode 0644, keeping the previous file as `.bak`.
fn write_policy(path: &Path, text: &str) -> Result<(), CmdError> {
    use pilotd_core::service::state_file::write_atomically_with_mode;
    let fail = |e: std::io::Error| {
        CmdError::Runtime(format!(
            "cannot write {}: {e}\n  hint: run as root for /etc/pilotd, or pass --output FILE",
            path.display()
        ))
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    // Temp files with unique names, created without following links (state_file), for the
    // backup too: /etc/pilotd is root's, but --output may name any directory.
    match std::fs::read(path) {
        Ok(old) => write_atomically_with_mode(&path.with_extension("toml.bak"), &old, 0o644)
            .map_err(fail)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    write_atomically_with_mode(path, text.as_bytes(), 0o644).map_err(fail)
}
