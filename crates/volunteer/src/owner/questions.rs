//! The questions `pilotd init` asks the owner, and the commented policy file their answers
//! write. Each answer is checked as it is given (a bad one is explained and asked again), so
//! the file holds what the owner meant; `init` still parses it as `check` does before writing
//! it. Asked on the handles given (a terminal, piped answers), or set one by one from flags
//! (`Answers::set`); no clock is read (`today`, the local zone are given).

use chrono::NaiveDate;
use pilotd_core::config::policy::{FAN_RANGE, TEMPERATURE_RANGE};
use pilotd_core::config::units::{
    ShareUnit, StrOrInt, UnitError, parse_celsius, parse_days, parse_duration, parse_rpm,
    parse_share, parse_time_of_day,
};
use pilotd_core::zone::Zone;
use std::io::{BufRead, Write};

/// The owner's answers, each already checked.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answers {
    pub timezone: String,
    /// TOML array items for `windows`.
    pub windows: Vec<(String, String, String)>,
    pub sessions: String,
    pub cpus: String,
    pub memory: String,
    pub longest_job: String,
    pub on_return: String,
    pub on_metered: String,
    /// Whether using the machine without typing counts (`media_is_use`,
    /// `inhibitors_are_use`): "true" or "false".
    pub media: String,
    /// `[comfort] max_temperature` ("80C"), or "none".
    pub max_temperature: String,
    /// `[comfort] max_fan` ("3000rpm"), or "none".
    pub max_fan: String,
}

/// Why an answer is not taken (the message says what would be), or why the owner could not
/// be asked.
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
    #[error("{0} is outside {1}; or answer none")]
    OutOfRange(String, String),
    /// No question by this name (`Answers::set`).
    #[error("no question `{0}`")]
    Unknown(String),
    #[error("cannot talk to the terminal: {0}")]
    Terminal(String),
    /// The answers ended before the questions did, and the defaults were not to be taken.
    #[error("no answer (end of input); answer every question, or use --yes to take the defaults")]
    EndOfInput,
}

struct Question {
    /// The question's name: `init`'s flag for it, without the dashes.
    name: &'static str,
    prompt: &'static str,
    default: fn(&Answers) -> String,
    apply: fn(&mut Answers, &str) -> Result<(), AnswerError>,
    /// Asked since after the wizard's first release, and so after every question of that
    /// one: answers a script pipes for the older wizard end before it, and it then takes its
    /// default rather than failing an install script that worked.
    later: bool,
}

const QUESTIONS: &[Question] = &[
    Question {
        name: "when",
        prompt: "When may this machine compute?\n  nights-and-weekends, nights, weekends, always,\n  or your own windows like \"mon-fri 19:00-07:30; sat,sun 00:00-24:00\"",
        default: |_| "nights-and-weekends".into(),
        apply: |a, s| {
            a.windows = parse_when(s)?;
            Ok(())
        },
        later: false,
    },
    Question {
        name: "sessions",
        prompt: "Stop computing when someone uses this machine?\n  active: a session in use stops it; a locked screen, or no keyboard or mouse for 15 minutes, does not\n          (locks: GNOME, KDE and most lockers through logind; idleness: the keyboard and mouse\n          on every desktop, GNOME's own idle hint; ssh and consoles: their terminal)\n  any: any login stops it, even a locked one; ignore: logins do not matter",
        default: |_| "active".into(),
        apply: |a, s| {
            let meant = match s {
                "any" | "yes" | "y" => Some("any"),
                "active" => Some("active"),
                "ignore" | "no" | "n" => Some("ignore"),
                _ => None,
            };
            pick(&mut a.sessions, meant, "any, active or ignore")
        },
        later: false,
    },
    Question {
        name: "cpus",
        prompt: "How much of the CPUs may it use? (a percentage like 50% or a number of CPUs)",
        default: |_| "50%".into(),
        apply: |a, s| {
            parse_share(&StrOrInt::Str(s.into()), ShareUnit::Count)?;
            a.cpus = s.into();
            Ok(())
        },
        later: false,
    },
    Question {
        name: "memory",
        prompt: "How much memory? (a percentage like 50% or a size like 8GiB)",
        default: |_| "50%".into(),
        apply: |a, s| {
            parse_share(&StrOrInt::Str(s.into()), ShareUnit::Bytes)?;
            a.memory = s.into();
            Ok(())
        },
        later: false,
    },
    Question {
        name: "longest-job",
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
        later: false,
    },
    Question {
        name: "on-return",
        prompt: "When you come back: pause (freeze, resume later), graceful (stop cleanly within 10 minutes) or fast (stop at once)?",
        default: |_| "graceful".into(),
        apply: |a, s| {
            let meant = matches!(s, "pause" | "graceful" | "fast").then_some(s);
            pick(&mut a.on_return, meant, "pause, graceful or fast")
        },
        later: false,
    },
    Question {
        name: "timezone",
        prompt: "Your time zone? (IANA name)",
        default: |a| a.timezone.clone(),
        apply: |a, s| {
            s.parse::<Zone>()
                .map_err(|_| AnswerError::TimeZone(s.to_string()))?;
            a.timezone = s.into();
            Ok(())
        },
        later: false,
    },
    // Last, after the questions of earlier versions: a script's answers keep their places.
    Question {
        name: "on-metered",
        prompt: "On a metered network (a phone's hotspot, or a connection you marked metered in NetworkManager):\n  no-downloads (no image or new worker; running ones finish their jobs), pause (also pause them) or ignore?",
        default: |_| "no-downloads".into(),
        apply: |a, s| {
            let meant = matches!(s, "no-downloads" | "pause" | "ignore").then_some(s);
            pick(&mut a.on_metered, meant, "no-downloads, pause or ignore")
        },
        later: true,
    },
    Question {
        name: "media",
        prompt: "Does watching, listening or a call count as using this machine, without a key typed?\n  yes: sound playing or recorded, a camera in use, or a program keeping the screen awake\n       (a player, a presentation) keeps the workers away; a locked screen outweighs a film\n       or music left playing, never a call or a camera\n  no: only logins, the keyboard and the mouse count",
        default: |_| "yes".into(),
        apply: |a, s| {
            let meant = match s {
                "yes" | "y" | "true" => Some("true"),
                "no" | "n" | "false" => Some("false"),
                _ => None,
            };
            pick(&mut a.media, meant, "yes or no")
        },
        later: true,
    },
    Question {
        name: "max-temperature",
        prompt: "The hottest this machine's CPU may get while it computes? e.g. 80C (laptops run\n  hot by design: 90C; `sensors` shows it now). Above it the workers get less CPU, a step at\n  a time, and pause at the lowest step. none: no limit",
        default: |_| "none".into(),
        apply: |a, s| {
            limit(
                &mut a.max_temperature,
                s,
                parse_celsius,
                TEMPERATURE_RANGE,
                "C",
            )
        },
        later: true,
    },
    Question {
        name: "max-fan",
        prompt: "The fastest any fan may spin while it computes? e.g. 3000rpm (`sensors` shows them\n  now). Above it, as above. none: no limit",
        default: |_| "none".into(),
        apply: |a, s| limit(&mut a.max_fan, s, parse_rpm, FAN_RANGE, "rpm"),
        later: true,
    },
];

/// "No limit", as an owner may say it.
/// An answer among choices: what it means (`None`: none of them; `choices` says which).
fn pick(field: &mut String, meant: Option<&str>, choices: &'static str) -> Result<(), AnswerError> {
    *field = meant.ok_or(AnswerError::Choice(choices))?.into();
    Ok(())
}

/// A comfort limit: none (or no, off), or what `parse` reads, within `range` (in `unit`).
fn limit<T: PartialOrd + std::fmt::Display>(
    field: &mut String,
    s: &str,
    parse: fn(&StrOrInt) -> Result<T, UnitError>,
    range: std::ops::RangeInclusive<T>,
    unit: &str,
) -> Result<(), AnswerError> {
    if matches!(s.trim(), "none" | "no" | "off" | "n") {
        *field = "none".into();
        return Ok(());
    }
    let v = parse(&StrOrInt::Str(s.into()))?;
    if !range.contains(&v) {
        let (from, to) = (range.start(), range.end());
        let within = format!("{from}{unit} to {to}{unit}");
        return Err(AnswerError::OutOfRange(format!("{v}{unit}"), within));
    }
    *field = s.into();
    Ok(())
}

/// A `[comfort]` limit's line: set, or commented out with an example.
fn limit_line(key: &str, value: &str, example: &str) -> String {
    if value == "none" {
        format!("# {key} = \"{example}\"")
    } else {
        format!("{key} = \"{value}\"")
    }
}

/// Presets or explicit windows separated by `;`, each "DAYS HH:MM-HH:MM".
pub(crate) fn parse_when(s: &str) -> Result<Vec<(String, String, String)>, AnswerError> {
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
    /// Every question's default; the time zone's is `local`, this machine's.
    pub fn defaults(local: &Zone) -> Answers {
        let mut a = Answers {
            timezone: local.name().to_string(),
            ..Answers::default()
        };
        for q in QUESTIONS {
            let d = (q.default)(&a);
            (q.apply)(&mut a, &d).expect("defaults are valid");
        }
        a
    }

    /// Answers the question `name` (`init`'s flag for it, without the dashes) with `value`.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), AnswerError> {
        let q = QUESTIONS
            .iter()
            .find(|q| q.name == name)
            .ok_or_else(|| AnswerError::Unknown(name.to_string()))?;
        (q.apply)(self, value)
    }

    /// The commented policy file, written on `today`.
    pub fn render(&self, today: NaiveDate) -> String {
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
# Someone using the machine without typing is here too: sound playing or recorded, or a
# camera in use, by a user who counts (a film, music, a call; by kind only, never what)...
media_is_use = {media}
# ...or a program holding off idleness in logind (a player, a presentation,
# `systemd-inhibit --what=idle`). A locked screen outweighs a film or music, not a call.
inhibitors_are_use = {media}
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
# On a metered network (NetworkManager: a phone's hotspot, a connection marked metered):
# "no-downloads" (no image pull, no new worker; running ones finish their jobs), "pause"
# (also pause running workers) or "ignore".
on_metered = "{on_metered}"

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

[comfort]
# The hottest the CPU may get while workers compute (laptops run hot by design: 90C), and
# the fastest any fan may spin (`sensors` shows both now). Above either, the workers get
# less CPU, a step at a time, and pause at the lowest step; no limit when commented out.
{max_temperature}
{max_fan}
# How long the machine must stay cool before the workers' CPU rises a step.
cool_for = "3m"
# Hours with a lower CPU share for all workers (a count or a percentage), e.g. nights in a
# bedroom: quiet_hours = [ {{ days = "daily", from = "22:00", to = "07:00", cpus = 1 }} ]
quiet_hours = []
"#,
            date = today.format("%Y-%m-%d"),
            tz = self.timezone,
            sessions = self.sessions,
            on_return = self.on_return,
            on_metered = self.on_metered,
            cpus = self.cpus,
            memory = self.memory,
            longest_job = self.longest_job,
            media = self.media,
            max_temperature = limit_line("max_temperature", &self.max_temperature, "80C"),
            max_fan = limit_line("max_fan", &self.max_fan, "3000rpm"),
        )
    }
}

/// Asks every question on `out`, reading answers from `input`. An empty line takes the
/// default; a bad answer is explained and asked again; end of input takes the defaults of the
/// remaining questions when `yes` is set, or when they all came after the first release's
/// (`Question::later`: a script's answers for an older wizard still install).
pub fn ask(
    mut a: Answers,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    yes: bool,
) -> Result<Answers, AnswerError> {
    let io = |e: std::io::Error| AnswerError::Terminal(e.to_string());
    for q in QUESTIONS {
        let default = (q.default)(&a);
        loop {
            write!(out, "\n{}\n  [{default}] > ", q.prompt).map_err(io)?;
            out.flush().map_err(io)?;
            let mut line = String::new();
            if input.read_line(&mut line).map_err(io)? == 0 {
                if yes || q.later {
                    writeln!(out).map_err(io)?;
                    break;
                }
                return Err(AnswerError::EndOfInput);
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

#[cfg(test)]
mod tests {
    use super::*;
    use pilotd_core::config;
    use std::path::Path;

    fn defaults() -> Answers {
        Answers::defaults(&Zone::utc())
    }

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

    /// An install script that pipes the first release's answers, and no more, still installs:
    /// the questions asked since take their defaults, and they all come after the old ones.
    #[test]
    fn the_first_release_s_answers_alone_still_install() {
        let first = QUESTIONS.iter().take_while(|q| !q.later).count();
        assert!(
            QUESTIONS[first..].iter().all(|q| q.later),
            "a question of the first release comes after a later one"
        );
        let mut input: &[u8] = b"always\nactive\n1\n128MiB\n1h\npause\nUTC\n";
        assert_eq!(input.iter().filter(|b| **b == b'\n').count(), first);
        let a = ask(defaults(), &mut input, &mut Vec::new(), false).unwrap();
        assert_eq!(a.on_return, "pause");
        assert_eq!(a.on_metered, "no-downloads");
        // One answer short of the first release's still fails, as it did.
        let mut short: &[u8] = b"always\nactive\n1\n128MiB\n1h\npause\n";
        assert!(matches!(
            ask(defaults(), &mut short, &mut Vec::new(), false),
            Err(AnswerError::EndOfInput)
        ));
    }

    #[test]
    fn piped_answers_with_a_retry_produce_a_valid_policy() {
        let mut input: &[u8] =
            b"nights\nactive\n150%\n75%\n6GiB\n4h\npause\nEurope/Rome\ncheap\npause\n";
        let mut out = Vec::new();
        let a = ask(defaults(), &mut input, &mut out, false).unwrap();
        let shown = String::from_utf8(out).unwrap();
        assert!(
            shown.contains("must be above 0% and at most 100%"),
            "{shown}"
        );
        assert_eq!(a.cpus, "75%");
        assert_eq!(a.memory, "6GiB");
        assert_eq!(a.sessions, "active");
        assert_eq!(a.timezone, "Europe/Rome");
        assert!(
            shown.contains("answer no-downloads, pause or ignore"),
            "{shown}"
        );
        assert_eq!(a.on_metered, "pause");
        let text = a.render(NaiveDate::from_ymd_opt(2026, 12, 1).unwrap());
        assert!(text.starts_with("# pilotd owner policy, written by `pilotd init` on 2026-12-01."));
        let p = config::parse_policy(
            Path::new("p.toml"),
            &text,
            &config::SiteConfig::defaults(),
            None,
            Zone::utc(),
        )
        .unwrap();
        assert_eq!(p.on_return, config::Evict::Pause);
        assert_eq!(p.on_metered, config::MeteredRule::Pause);
        assert_eq!(p.longest_job, std::time::Duration::from_secs(4 * 3600));
        assert_eq!(p.timezone, Zone::named("Europe/Rome").unwrap());
        // The answers ended before the question asked since: its default, use counts.
        assert!(p.media_is_use && p.inhibitors_are_use);
    }

    /// Whether watching, listening or a call counts: asked last, written as both keys, and
    /// answered by its default when piped answers written for the earlier questions end.
    #[test]
    fn using_without_typing_is_asked_last_and_written_as_both_keys() {
        let parse = |a: &Answers| {
            let text = a.render(NaiveDate::from_ymd_opt(2026, 12, 1).unwrap());
            config::parse_policy(
                Path::new("p.toml"),
                &text,
                &config::SiteConfig::defaults(),
                None,
                Zone::utc(),
            )
            .unwrap()
        };
        let mut input: &[u8] =
            b"always\nactive\n1\n128MiB\n1h\npause\nUTC\nno-downloads\nmaybe\nno\n";
        let mut out = Vec::new();
        let a = ask(defaults(), &mut input, &mut out, false).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("answer yes or no"));
        let p = parse(&a);
        assert!(!p.media_is_use && !p.inhibitors_are_use);
        // Seven answers and eight, as scripts piped them before the question existed.
        for piped in [
            &b"always\nactive\n1\n128MiB\n1h\npause\nUTC\n"[..],
            b"always\nactive\n1\n128MiB\n1h\npause\nUTC\nignore\n",
        ] {
            let mut input = piped;
            let a = ask(defaults(), &mut input, &mut Vec::new(), false).unwrap();
            assert!(parse(&a).media_is_use);
        }
        // The flag.
        let mut a = defaults();
        a.set("media", "no").unwrap();
        assert!(!parse(&a).inhibitors_are_use);
        assert_eq!(
            a.set("media", "sometimes"),
            Err(AnswerError::Choice("yes or no"))
        );
    }

    #[test]
    fn end_of_input_is_an_error_unless_yes() {
        let mut input: &[u8] = b"always\n";
        assert_eq!(
            ask(defaults(), &mut input, &mut Vec::new(), false),
            Err(AnswerError::EndOfInput)
        );
        let mut input: &[u8] = b"always\n";
        let a = ask(defaults(), &mut input, &mut Vec::new(), true).unwrap();
        assert_eq!(a.windows, parse_when("always").unwrap());
        assert_eq!(a.sessions, "active");
        assert_eq!(a.on_metered, "no-downloads");
    }

    /// The comfort questions: none by default (the file then holds the keys commented out),
    /// a limit checked as `check` checks it, and the file they write is a valid policy.
    #[test]
    fn the_comfort_limits_are_asked_last_and_written_to_comfort() {
        let a = defaults();
        assert_eq!(
            (a.max_temperature.as_str(), a.max_fan.as_str()),
            ("none", "none")
        );
        let text = a.render(NaiveDate::from_ymd_opt(2026, 12, 1).unwrap());
        assert!(text.contains("\n# max_temperature = \"80C\"\n"), "{text}");
        let parse = |text: &str| {
            config::parse_policy(
                Path::new("p.toml"),
                text,
                &config::SiteConfig::defaults(),
                None,
                Zone::utc(),
            )
            .unwrap()
        };
        assert!(!parse(&text).comfort.limits_set());
        let mut input: &[u8] =
            b"always\nactive\n1\n128MiB\n1h\npause\nUTC\nignore\nyes\n200C\n85C\n3500 rpm\n";
        let mut out = Vec::new();
        let a = ask(defaults(), &mut input, &mut out, false).unwrap();
        let shown = String::from_utf8(out).unwrap();
        assert!(
            shown.contains("200C is outside 40C to 105C; or answer none"),
            "{shown}"
        );
        let text = a.render(NaiveDate::from_ymd_opt(2026, 12, 1).unwrap());
        assert!(
            text.contains("\nmax_temperature = \"85C\"\nmax_fan = \"3500 rpm\"\n"),
            "{text}"
        );
        let c = parse(&text).comfort;
        assert_eq!((c.max_temperature, c.max_fan), (Some(85.0), Some(3500)));
        let mut a = defaults();
        a.set("max-fan", "2800rpm").unwrap();
        a.set("max-temperature", "off").unwrap();
        assert_eq!(
            (a.max_temperature.as_str(), a.max_fan.as_str()),
            ("none", "2800rpm")
        );
        assert!(a.set("max-fan", "loud").is_err());
    }

    /// A flag answers its question as the prompt would, and only a question that exists.
    #[test]
    fn a_flag_answers_its_question_by_name() {
        let mut a = defaults();
        a.set("longest-job", "6h").unwrap();
        a.set("on-return", "fast").unwrap();
        a.set("on-metered", "ignore").unwrap();
        assert_eq!(a.on_metered, "ignore");
        a.set("when", "weekends").unwrap();
        assert_eq!(a.longest_job, "6h");
        assert_eq!(a.on_return, "fast");
        assert_eq!(a.windows, parse_when("weekends").unwrap());
        assert_eq!(a.set("longest-job", "0s"), Err(AnswerError::Zero));
        assert_eq!(
            a.set("colour", "blue"),
            Err(AnswerError::Unknown("colour".into()))
        );
    }
}
