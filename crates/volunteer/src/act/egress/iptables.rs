//! The filter in the kernel: read with one `iptables -S` (the whole filter table, so one
//! process per check), changed only by `iptables-restore --noflush` transactions. Blocking:
//! callers in the daemon run these on tokio's blocking threads.

use super::{EgressError, Filter, Listing, Printed, Refusal, Verdict, diagnose};
use std::io::Write;
use std::process::{Command, Stdio};

/// How long iptables may wait for the xtables lock (legacy iptables; another program
/// changing rules holds it): bounded, so a check or a start never hangs on it.
const LOCK_WAIT_S: &str = "10";

/// The filter table as it is now.
pub fn list() -> Result<Listing, EgressError> {
    let args = ["-w", LOCK_WAIT_S, "-t", "filter", "-S"];
    let fail = |message: String| EgressError::Iptables {
        args: args.join(" "),
        message,
    };
    let out = Command::new("iptables")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(Listing::parse(&String::from_utf8_lossy(&out.stdout)))
}

/// Commits `script` as one transaction: all of it, or (on any error) none of it.
fn restore(script: &str) -> Result<(), EgressError> {
    let fail = |message: String| EgressError::Restore { message };
    let mut child = Command::new("iptables-restore")
        .args(["-w", LOCK_WAIT_S, "--noflush"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    // A program that exits before reading it all (it refused the first line) closes the
    // pipe: what it said on stderr is the reason, not the broken pipe.
    let written = child
        .stdin
        .take()
        .map_or(Ok(()), |mut stdin| stdin.write_all(script.as_bytes()));
    let out = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
    let said = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Try `"))
        .collect::<Vec<_>>()
        .join("; ");
    match (out.status.success(), written) {
        (true, Ok(())) => Ok(()),
        (true, Err(e)) => Err(fail(format!("it did not read all of them: {e}"))),
        (false, written) if said.is_empty() => Err(fail(format!(
            "it exited with {}{}",
            out.status,
            written.err().map(|e| format!(" ({e})")).unwrap_or_default()
        ))),
        (false, _) => Err(fail(said)),
    }
}

/// What `ensure` found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// Whole as it was.
    Intact,
    /// Not there at all; installed.
    Installed,
    /// Damaged (why); rebuilt as a new generation without a gap.
    Rebuilt { why: String },
}

/// Makes sure the filter is whole: one read when it is; when it is not, a new generation
/// swapped in (`rebuild_script`) and read back. `printed` carries what iptables printed for
/// pilotd's rules when that differs from their spelling (learned here, kept by the caller).
pub fn ensure(f: &Filter, printed: &mut Option<Printed>) -> Result<Ensured, EgressError> {
    let before = list()?;
    let found = match diagnose(f, &before, printed.as_ref()) {
        Verdict::Intact { .. } => return Ok(Ensured::Intact),
        Verdict::Missing => Ensured::Installed,
        Verdict::Damaged(why) => Ensured::Rebuilt { why },
    };
    let generation = rebuild(f, before)?;
    let after = list()?;
    match diagnose(f, &after, printed.as_ref()) {
        Verdict::Intact { .. } => return Ok(found),
        Verdict::Missing => {
            return Err(EgressError::NotRestored {
                why: "its chains vanished as soon as they were written".into(),
            });
        }
        Verdict::Damaged(_) => {}
    }
    // Perhaps only the spelling differs (another iptables version): what was just written,
    // read back with as many rules as were written, is what the chains must hold from now on.
    let read = |hook| -> Vec<String> {
        after
            .rules_of(&f.chain_name(hook, generation))
            .map(str::to_string)
            .collect()
    };
    let learned = Printed {
        filter: f.clone(),
        forward: read(super::Hook::Forward),
        input: read(super::Hook::Input),
    };
    let written = |hook| f.chain_rules(hook, Refusal::Reject).len();
    if learned.forward.len() == written(super::Hook::Forward)
        && learned.input.len() == written(super::Hook::Input)
    {
        match diagnose(f, &after, Some(&learned)) {
            Verdict::Intact { .. } => {
                tracing::warn!(
                    chain = %f.chain,
                    "iptables prints pilotd's rules otherwise than pilotd writes them; checking them as printed from now on"
                );
                *printed = Some(learned);
                return Ok(found);
            }
            Verdict::Damaged(why) => return Err(EgressError::NotRestored { why }),
            Verdict::Missing => {}
        }
    }
    Err(EgressError::NotRestored {
        why: match diagnose(f, &after, None) {
            Verdict::Damaged(why) => why,
            _ => "it reads back otherwise than written".into(),
        },
    })
}

/// Swaps in a new generation of the filter; its number. Refused packets are rejected where
/// the kernel can, dropped where it cannot. A transaction refused because the table changed
/// since it was read is tried once more on a fresh read.
fn rebuild(f: &Filter, listing: Listing) -> Result<u32, EgressError> {
    let (script, generation) = super::rebuild_script(f, &listing, Refusal::Reject);
    let Err(first) = restore(&script) else {
        return Ok(generation);
    };
    let fresh = list()?;
    for refusal in [Refusal::Reject, Refusal::Drop] {
        let (script, generation) = super::rebuild_script(f, &fresh, refusal);
        if restore(&script).is_ok() {
            return Ok(generation);
        }
    }
    Err(first)
}

/// Removes the filter (the jumps into it, then its chains, of every generation), in one
/// transaction; what is already gone is fine.
pub fn remove(f: &Filter) -> Result<(), EgressError> {
    super::removal_script(f, &list()?).map_or(Ok(()), |script| restore(&script))
}
