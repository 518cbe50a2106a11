//! `pilotd init`: asks the owner a few plain questions and writes a commented policy.toml,
//! then shows the resulting week. Works interactively, with piped answers (one per line; an
//! empty line takes the default), or with `--yes` and flags for scripted installs. The file is
//! validated by the same parser `check` uses before it is written, so init never writes a
//! policy pilotd would refuse.

use super::{CmdError, schedule};
use crate::cli::{Global, InitArgs};
use chrono::Utc;
use pilotd_core::config::units::{
    ShareUnit, StrOrInt, UnitError, parse_days, parse_duration, parse_share, parse_time_of_day,
};
use pilotd_core::config::{self, SiteFile};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

/// The owner's answers, each already checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Answers {
    pub timezone: String,
    /// TOML array items for `windows`.
    pub windows: Vec<(String, String, String)>,
    pub sessions: String,
    pub cpus: String,
    pub memory: String,
    pub longest_job: String,
    pub on_return: String,
}

/// Why an answer is not taken; the message says what would be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error(transparent)]
    Unit(#[from] UnitError),
    #[error("answer {0}")]
    Choice(&'static str),
    #[error("it must be longer than 0")]
    Zero,
    #[error("unknown time zone `{0}`; e.g. Europe/Rome or America/Chicago")]
    TimeZone(String),
    #[error("`{0}` is not a window; write DAYS HH:MM-HH:MM, e.g. \"mon-fri 19:00-07:30\"")]
    Window(String),
    #[error("window {0}-{1} is empty")]
    EmptyWindow(String, String),
    #[error("no window given")]
    NoWindow,
}

struct Question {
    prompt: &'static str,
    default: fn(&Answers) -> String,
    apply: fn(&mut Answers, &str) -> Result<(), AnswerError>,
}

const QUESTIONS: &[Question] = &[
    Question {
        prompt: "When may this machine compute?\n  nights-and-weekends, nights, weekends, always,\n  or your own windows like \"mon-fri 19:00-07:30; sat,sun 00:00-24:00\"",
        default: |_| "nights-and-weekends".into(),
        apply: |a, s| {
            a.windows = parse_when(s)?;
            Ok(())
        },
    },
    Question {
        prompt: "Stop computing when someone uses this machine?\n  active: a session in use stops it; a locked screen, or no keyboard or mouse for 15 minutes, does not\n          (locks: GNOME, KDE and most lockers through logind; idleness: the keyboard and mouse\n          on every desktop, GNOME's own idle hint; ssh and consoles: their terminal)\n  any: any login stops it, even a locked one; ignore: logins do not matter",
        default: |_| "active".into(),
        apply: |a, s| match s {
            "any" | "active" | "ignore" => {
                a.sessions = s.into();
                Ok(())
            }
            "yes" | "y" => {
                a.sessions = "any".into();
                Ok(())
            }
            "no" | "n" => {
                a.sessions = "ignore".into();
                Ok(())
            }
            _ => Err(AnswerError::Choice("any, active or ignore")),
        },
    },
    Question {
        prompt: "How much of the CPUs may it use? (a percentage like 50% or a number of CPUs)",
        default: |_| "50%".into(),
        apply: |a, s| {
            parse_share(&StrOrInt::Str(s.into()), ShareUnit::Count)?;
            a.cpus = s.into();
            Ok(())
        },
    },
    Question {
        prompt: "How much memory? (a percentage like 50% or a size like 8GiB)",
        default: |_| "50%".into(),
        apply: |a, s| {
            parse_share(&StrOrInt::Str(s.into()), ShareUnit::Bytes)?;
            a.memory = s.into();
            Ok(())
        },
    },
    Question {
        prompt: "The longest job you accept? (e.g. 8h; workers stop taking jobs this long before they must leave)",
        default: |_| "8h".into(),
        apply: |a, s| {
            let d = parse_duration(s)?;
            if d.is_zero() {
                return Err(AnswerError::Zero);
            }
            a.longest_job = s.into();
            Ok(())
        },
    },
    Question {
        prompt: "When you come back: pause (freeze, resume later), graceful (stop cleanly within 10 minutes) or fast (stop at once)?",
        default: |_| "graceful".into(),
        apply: |a, s| match s {
            "pause" | "graceful" | "fast" => {
                a.on_return = s.into();
                Ok(())
            }
            _ => Err(AnswerError::Choice("pause, graceful or fast")),
        },
    },
    Question {
        prompt: "Your time zone? (IANA name)",
        default: |a| a.timezone.clone(),
        apply: |a, s| {
            s.parse::<pilotd_core::zone::Zone>()
                .map_err(|_| AnswerError::TimeZone(s.to_string()))?;
            a.timezone = s.into();
            Ok(())
        },
    },
];

/// Presets or explicit windows separated by `;`, each "DAYS HH:MM-HH:MM".
pub fn parse_when(s: &str) -> Result<Vec<(String, String, String)>, AnswerError> {
    let w = |d: &str, f: &str, t: &str| (d.to_string(), f.to_string(), t.to_string());
    match s.trim() {
        "nights-and-weekends" => {
            return Ok(vec![
                w("mon-fri", "19:00", "07:30"),
                w("sat,sun", "00:00", "24:00"),
                w("mon", "00:00", "07:30"),
            ]);
        }
        "nights" => return Ok(vec![w("daily", "19:00", "07:30")]),
        "weekends" => return Ok(vec![w("sat,sun", "00:00", "24:00")]),
        "always" => return Ok(vec![w("daily", "00:00", "24:00")]),
        _ => {}
    }
    s.split(';')
        .filter(|p| !p.trim().is_empty())
        .map(|part| {
            let bad = || AnswerError::Window(part.trim().to_string());
            let (days, times) = part.trim().rsplit_once(' ').ok_or_else(bad)?;
            let (from, to) = times.split_once('-').ok_or_else(bad)?;
            parse_days(days)?;
            let (f, t) = (parse_time_of_day(from)?, parse_time_of_day(to)?);
            if f == t {
                return Err(AnswerError::EmptyWindow(from.to_string(), to.to_string()));
            }
            Ok(w(days.trim(), from, to))
        })
        .collect::<Result<Vec<_>, AnswerError>>()
        .and_then(|v| {
            if v.is_empty() {
                Err(AnswerError::NoWindow)
            } else {
                Ok(v)
            }
        })
}

impl Answers {
    pub fn defaults() -> Answers {
        let mut a = Answers {
            timezone: config::local_timezone().name().to_string(),
            windows: vec![],
            sessions: String::new(),
            cpus: String::new(),
            memory: String::new(),
            longest_job: String::new(),
            on_return: String::new(),
        };
        for q in QUESTIONS {
            let d = (q.default)(&a);
            (q.apply)(&mut a, &d).expect("defaults are valid");
        }
        a
    }

    /// The commented policy file.
    pub fn render(&self) -> String {
        let windows: String = self
            .windows
            .iter()
            .map(|(d, f, t)| format!("  {{ days = \"{d}\", from = \"{f}\", to = \"{t}\" }},\n"))
            .collect();
        format!(
            r#"# pilotd owner policy, written by `pilotd init` on {date}.
# Edit any line; `pilotd check` finds mistakes, `pilotd schedule` shows the week.
# After editing: `systemctl reload pilotd` (or send pilotd SIGHUP).

# The time zone the windows are written in.
timezone = "{tz}"

[schedule]
# When the machine may compute: the union of these windows. days: mon..sun, "mon-fri",
# "sat,sun" or "daily". A `to` earlier than `from` runs into the next morning.
windows = [
{windows}]
# Workers are gone this long before a window ends.
evict_before_end = "10m"

[owner]
# "active": a session in use means you are here; a session locked for lock_grace, idle
# for session_idle (logind's idle hint, a terminal's idle time), or with no keyboard or mouse
# input on this machine for session_idle, does not. "any": any login, even a locked one.
# "ignore": logins do not matter.
sessions = "{sessions}"
session_idle = "15m"
lock_grace = "1m"
# Keep the machine from sleeping on its idle timer while workers compute in a window
# (a sleep you ask for is never held up; workers pause first).
keep_awake = false
# Users that never count as you, and accounts below this uid (system accounts).
ignore_users = ["root", "condor"]
system_uid_below = 1000
# Other programs using more CPU than this for busy_for make the workers leave.
max_owner_cpu = "25%"
busy_for = "2m"
# The machine must be free this long before workers start.
free_for = "15m"
# Programs that mean "I am using this machine" while they run.
exclusive_processes = []
# On battery: "stop" or "ignore".
on_battery = "stop"
# When you come back: "pause", "graceful" (within grace) or "fast".
on_return = "{on_return}"
grace = "10m"

[share]
cpus = "{cpus}"
memory = "{memory}"
# Scratch disk for jobs.
disk = "20GiB"
gpus = 0
# Worker containers; the share is split evenly between them.
workers = 1

[jobs]
# The longest job you accept.
longest_job = "{longest_job}"
"#,
            date = Utc::now().format("%Y-%m-%d"),
            tz = self.timezone,
            sessions = self.sessions,
            on_return = self.on_return,
            cpus = self.cpus,
            memory = self.memory,
            longest_job = self.longest_job,
        )
    }
}

/// Asks every question on `out`, reading answers from `input`. An empty line takes the
/// default; a bad answer is explained and asked again; end of input takes the defaults of the
/// remaining questions only when `yes` is set.
pub fn ask(
    mut a: Answers,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    yes: bool,
) -> Result<Answers, CmdError> {
    let io = |e: std::io::Error| CmdError::Runtime(format!("cannot talk to the terminal: {e}"));
    for q in QUESTIONS {
        let default = (q.default)(&a);
        loop {
            write!(out, "\n{}\n  [{default}] > ", q.prompt).map_err(io)?;
            out.flush().map_err(io)?;
            let mut line = String::new();
            if input.read_line(&mut line).map_err(io)? == 0 {
                if yes {
                    break;
                }
                return Err(CmdError::Usage(
                    "no answer (end of input); answer every question, or use --yes to take the defaults".into(),
                ));
            }
            let answer = line.trim();
            let answer = if answer.is_empty() {
                default.as_str()
            } else {
                answer
            };
            match (q.apply)(&mut a, answer) {
                Ok(()) => break,
                Err(e) => writeln!(out, "  {e}").map_err(io)?,
            }
        }
    }
    Ok(a)
}

/// Applies the flags given on the command line.
pub fn apply_flags(mut a: Answers, args: &InitArgs) -> Result<Answers, CmdError> {
    let flags: [(&Option<String>, usize, &str); 7] = [
        (&args.when, 0, "--when"),
        (&args.sessions, 1, "--sessions"),
        (&args.cpus, 2, "--cpus"),
        (&args.memory, 3, "--memory"),
        (&args.longest_job, 4, "--longest-job"),
        (&args.on_return, 5, "--on-return"),
        (&args.timezone, 6, "--timezone"),
    ];
    for (value, i, name) in flags {
        if let Some(v) = value {
            (QUESTIONS[i].apply)(&mut a, v)
                .map_err(|e| CmdError::Usage(format!("{name} {v}: {e}")))?;
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
    let a = apply_flags(Answers::defaults(), args)?;
    let a = if args.yes {
        a
    } else {
        let stdin = std::io::stdin();
        let mut out = std::io::stderr();
        ask(a, &mut stdin.lock(), &mut out, false)?
    };
    let text = a.render();
    // Never write a file `check` would refuse.
    let policy = config::parse_policy(
        &path,
        &text,
        &site,
        pilotd_volunteer::host::this_machine(),
        config::local_timezone(),
    )?;
    // The policy being replaced, to compare with: read before it is overwritten. One that
    // does not parse any more has nothing to compare.
    let current = std::fs::read_to_string(&path).ok().map(|old| {
        config::parse_policy(
            &path,
            &old,
            &site,
            pilotd_volunteer::host::this_machine(),
            config::local_timezone(),
        )
    });
    write_policy(&path, &text)?;
    let now = Utc::now();
    let mut out = format!("wrote {}\n\n", path.display());
    out.push_str(&schedule::render(
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
    out.push_str("\nwhat this policy is expected to give per week:\n");
    for line in schedule::expected(&site, &policy, running, now) {
        out.push_str(&format!("  {line}\n"));
    }
    match &current {
        Some(Ok(old)) => {
            out.push_str("the policy it replaced (kept as .bak) would give:\n");
            for line in schedule::expected(&site, old, old, now) {
                out.push_str(&format!("  {line}\n"));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_presets_and_custom_windows() {
        assert_eq!(parse_when("always").unwrap().len(), 1);
        let w = parse_when("mon-fri 19:00-07:30; sat,sun 00:00-24:00").unwrap();
        assert_eq!(w[1], ("sat,sun".into(), "00:00".into(), "24:00".into()));
        assert_eq!(
            parse_when("funday 19:00-07:30").unwrap_err(),
            AnswerError::Unit(UnitError::Day("funday".into()))
        );
        assert_eq!(
            parse_when("mon 19:00").unwrap_err(),
            AnswerError::Window("mon 19:00".into())
        );
        assert!(
            parse_when("mon 09:00-09:00")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert_eq!(parse_when(" ; ").unwrap_err(), AnswerError::NoWindow);
    }

    #[test]
    fn piped_answers_with_a_retry_produce_a_valid_policy() {
        let mut input: &[u8] = b"nights\nactive\n150%\n75%\n6GiB\n4h\npause\nEurope/Rome\n";
        let mut out = Vec::new();
        let a = ask(Answers::defaults(), &mut input, &mut out, false).unwrap();
        let shown = String::from_utf8(out).unwrap();
        assert!(
            shown.contains("must be above 0% and at most 100%"),
            "{shown}"
        );
        assert_eq!(a.cpus, "75%");
        assert_eq!(a.memory, "6GiB");
        assert_eq!(a.sessions, "active");
        assert_eq!(a.timezone, "Europe/Rome");
        let text = a.render();
        let p = config::parse_policy(
            Path::new("p.toml"),
            &text,
            &config::SiteConfig::defaults(),
            None,
            pilotd_core::zone::Zone::utc(),
        )
        .unwrap();
        assert_eq!(p.on_return, config::Evict::Pause);
        assert_eq!(p.longest_job, std::time::Duration::from_secs(4 * 3600));
        assert_eq!(
            p.timezone,
            pilotd_core::zone::Zone::named("Europe/Rome").unwrap()
        );
    }

    #[test]
    fn end_of_input_is_an_error_unless_yes() {
        let mut input: &[u8] = b"always\n";
        assert!(ask(Answers::defaults(), &mut input, &mut Vec::new(), false).is_err());
        let mut input: &[u8] = b"always\n";
        let a = ask(Answers::defaults(), &mut input, &mut Vec::new(), true).unwrap();
        assert_eq!(a.windows, parse_when("always").unwrap());
        assert_eq!(a.sessions, "active");
    }
}
