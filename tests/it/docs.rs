//! Every `pilotd` command the documentation shows works: the commands are read from the fenced
//! code blocks of README.md and docs/*.md (not copied here), so an edit that breaks one, a
//! misspelt subcommand or a flag that no longer exists, fails this test.
//!
//! What counts as a command shown:
//! - in a ```` ```sh ```` (or `bash`, `shell`) block, every line, `\` continuations joined;
//! - in a bare or ```` ```console ```` block (a transcript: the command, then its output),
//!   only the lines after a `$ ` prompt.
//!
//! Comments (`# …`) are dropped; `&&`, `||`, `;` and `|` separate commands (a pipe's later
//! stages only consume pilotd's output); `sudo`, a path to the binary (`target/release/pilotd`)
//! and `cargo run [--release] --` all mean the `pilotd` under test. Other programs (docker,
//! systemctl, the test scripts) are not run. Each `pilotd` subcommand is either in [`RUN`]
//! (changes nothing on the machine: run, exit status 0 expected) or in [`NOT_RUN`] with the
//! reason; one in neither fails the test, so a new or misspelt subcommand in the docs cannot
//! slip by unrun.

use crate::harness;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Subcommands that only read files (and, for `plan`, ask the engine and logind read-only
/// questions) and print: run as the docs show them.
const RUN: &[&str] = &["check", "plan", "schedule", "import-ini", "completions"];

/// Subcommands shown but not run, and why.
const NOT_RUN: &[(&str, &str)] = &[
    ("run", "the daemon: starts workers and runs until stopped"),
    ("init", "writes the owner's policy"),
    ("status", "reports a running daemon (tests/it/service)"),
    ("open", "asks a running daemon for a key"),
    ("snooze", "changes a running daemon's decision"),
    ("resume", "changes a running daemon's decision"),
    ("gc", "removes containers, volumes and scratch dirs"),
    ("failsafe", "pauses or removes workers"),
    ("manpages", "writes into a system directory"),
    (
        "snapshot",
        "observes the live machine or cluster (its stand-in file is in STAND_INS)",
    ),
];

/// Today's count of commands run (README 5, docs/development.md 2, docs/kubernetes.md 3). The
/// test fails below it, so losing commands (a parser that finds nothing, a block whose fence
/// changed) is noticed: lower it only when removing a command from the docs on purpose.
const AT_LEAST_RUN: usize = 10;
/// Of those, the ones in docs/kubernetes.md, which need the `kubernetes` feature.
const KUBERNETES_RUN: usize = 3;

/// Paths the documents name that are not on a test machine (or are, and are that machine's
/// own), and the repository file that stands in for each. The documents keep the paths a
/// reader uses; each stand-in is the file that would really be there:
const STAND_INS: &[(&str, &str)] = &[
    // The Debian package installs packaging/pilotd.toml here (Cargo.toml's assets).
    ("/etc/pilotd/pilotd.toml", "packaging/pilotd.toml"),
    // ... and policies/default.toml here, until `pilotd init` (not run) replaces it.
    ("/etc/pilotd/policy.toml", "policies/default.toml"),
    // The operator's NRP provisioner INI in docs/kubernetes.md: a real one, from a site.
    (
        "osg_provisioner.conf",
        "tests/fixtures/kubernetes/osg_provisioner.conf",
    ),
    // What `pilotd snapshot > s.json` writes from a live cluster (not run, see NOT_RUN): a
    // snapshot of the same format.
    ("s.json", "tests/fixtures/kubernetes/snapshot.json"),
];

/// One command as a document shows it.
#[derive(Debug)]
struct Shown {
    doc: String,
    line: usize,
    /// The line as written (continuations joined), for messages.
    text: String,
    /// The words after `pilotd`.
    args: Vec<String>,
    /// `> FILE`: where the docs send its output.
    stdout_to: Option<String>,
    /// A transcript whose output is pilotd's error (`pilotd: …`): the docs show what a broken
    /// installation prints (troubleshooting.md), with files they describe but do not ship.
    shows_failure: bool,
}

impl Shown {
    /// The subcommand: the first word that is not a global option or its value.
    fn verb(&self) -> Option<&str> {
        let mut words = self.args.iter();
        while let Some(w) = words.next() {
            match w.as_str() {
                "-c" | "--config" | "--policy" | "--log-format" => {
                    words.next();
                }
                w if w.starts_with("--config=")
                    || w.starts_with("--policy=")
                    || w.starts_with("--log-format=") =>
                {
                    continue;
                }
                w => return Some(w),
            }
        }
        None
    }

    fn names(&self, option: &str, short: Option<&str>) -> bool {
        self.args.iter().any(|a| {
            a == option || Some(a.as_str()) == short || a.starts_with(&format!("{option}="))
        })
    }
}

#[test]
fn every_command_the_docs_show_works() {
    let mut docs = vec![harness::repo("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(harness::repo("docs"))
        .expect("docs/ is there")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    assert!(
        more.len() >= 6,
        "docs/*.md: expected the six documents by reader, found {more:?}"
    );
    docs.extend(more);

    let mut ran: BTreeMap<String, usize> = BTreeMap::new();
    let mut not_run = Vec::new();
    let mut failures = Vec::new();
    for doc in &docs {
        let name = doc
            .strip_prefix(harness::repo(""))
            .unwrap_or(doc)
            .display()
            .to_string();
        let text = std::fs::read_to_string(doc).expect("document readable");
        for block in blocks(&name, &text) {
            // Files the block's own commands write (`import-ini … > pilotd.toml`), which later
            // commands of the same block read.
            let written = tempfile::tempdir().expect("tempdir");
            for shown in block {
                let verb = shown.verb().unwrap_or("").to_string();
                let not_run_why = NOT_RUN.iter().find(|(v, _)| *v == verb).map(|(_, why)| why);
                assert!(
                    RUN.contains(&verb.as_str()) || not_run_why.is_some(),
                    "{}:{}: `{}` shows the subcommand `{verb}`, which this test neither runs \
                     (RUN) nor skips with a reason (NOT_RUN): a typo in the docs, or a new \
                     subcommand to add to one of the lists",
                    shown.doc,
                    shown.line,
                    shown.text
                );
                if shown.shows_failure {
                    not_run.push(format!(
                        "{}:{}: {} (shows the failure of a broken installation)",
                        shown.doc, shown.line, shown.text
                    ));
                    continue;
                }
                if let Some(why) = not_run_why {
                    not_run.push(format!(
                        "{}:{}: {} ({why})",
                        shown.doc, shown.line, shown.text
                    ));
                    continue;
                }
                if shown.doc == "docs/kubernetes.md" && !cfg!(feature = "kubernetes") {
                    not_run.push(format!(
                        "{}:{}: {} (built without kubernetes)",
                        shown.doc, shown.line, shown.text
                    ));
                    continue;
                }
                if let Err(why) = run(&shown, written.path()) {
                    failures.push(why);
                }
                *ran.entry(verb).or_default() += 1;
            }
        }
    }
    eprintln!("not run:\n  {}", not_run.join("\n  "));
    eprintln!("run: {ran:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let expected = if cfg!(feature = "kubernetes") {
        AT_LEAST_RUN
    } else {
        AT_LEAST_RUN - KUBERNETES_RUN
    };
    let total: usize = ran.values().sum();
    assert!(
        total >= expected,
        "ran {total} documented commands, expected at least {expected}: {ran:?}"
    );
    for verb in RUN {
        if *verb == "import-ini" && !cfg!(feature = "kubernetes") {
            continue;
        }
        assert!(
            ran.contains_key(*verb),
            "no document shows `pilotd {verb}` any more: {ran:?}"
        );
    }
}

/// Runs one shown command against the binary under test, from the repository's root (the
/// docs' relative paths, `policies/default.toml`, are the repository's).
fn run(shown: &Shown, written: &Path) -> Result<(), String> {
    let root = harness::repo("");
    let args: Vec<String> = shown.args.iter().map(|a| stand_in(a, written)).collect();
    let mut cmd = Command::new(harness::bin());
    cmd.args(&args).current_dir(&root).env_remove("RUST_LOG");
    // pilotd's defaults, `-c /etc/pilotd/pilotd.toml` and the `policy` it names, are
    // documented paths too: the same stand-ins, through the environment pilotd reads.
    if !shown.names("--config", Some("-c")) {
        cmd.env(
            "PILOTD_CONFIG",
            stand_in("/etc/pilotd/pilotd.toml", written),
        );
    }
    if !shown.names("--policy", None) {
        cmd.env(
            "PILOTD_POLICY",
            stand_in("/etc/pilotd/policy.toml", written),
        );
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", harness::bin().display()))?;
    if !out.status.success() {
        return Err(format!(
            "{}:{}: `{}` (run as `pilotd {}`) exited with {}:\n{}{}",
            shown.doc,
            shown.line,
            shown.text,
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if let Some(to) = &shown.stdout_to {
        std::fs::write(written.join(to), &out.stdout)
            .map_err(|e| format!("cannot keep the output for {to}: {e}"))?;
    }
    Ok(())
}

/// The file a documented path means here: one an earlier command of the block wrote, else
/// its stand-in, else the word as written.
fn stand_in(word: &str, written: &Path) -> String {
    let own = written.join(word);
    if !word.contains('/') && own.is_file() {
        return own.display().to_string();
    }
    match STAND_INS.iter().find(|(path, _)| *path == word) {
        Some((_, file)) => harness::repo(file).display().to_string(),
        None => word.to_string(),
    }
}

/// The `pilotd` commands of each fenced block of a Markdown document, in order.
fn blocks(doc: &str, text: &str) -> Vec<Vec<Shown>> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((_, line)) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let info = info.split_whitespace().next().unwrap_or("");
        let mut body = Vec::new();
        for (n, line) in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            body.push((n + 1, line.trim()));
        }
        let script = match info {
            "sh" | "bash" | "shell" => true,
            "" | "console" => false,
            _ => continue, // toml, json: not commands
        };
        let mut shown = Vec::new();
        let mut body = body.into_iter().peekable();
        while let Some((n, line)) = body.next() {
            let line = if script {
                line
            } else {
                match line.strip_prefix("$ ") {
                    Some(command) => command,
                    None => continue, // a transcript's output
                }
            };
            let mut joined = line.to_string();
            while joined.ends_with('\\') {
                joined.pop();
                match body.next() {
                    Some((_, next)) => joined.push_str(next),
                    None => break,
                }
            }
            let fails = !script
                && body
                    .peek()
                    .is_some_and(|(_, out)| out.starts_with("pilotd: "));
            shown.extend(commands(doc, n, &joined).into_iter().map(|s| Shown {
                shows_failure: fails,
                ..s
            }));
        }
        blocks.push(shown);
    }
    blocks
}

/// A shell word or an operator between commands.
#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Op(&'static str),
}

/// Splits a shell line the way sh would for these purposes: quotes, backslashes, comments and
/// the operators that separate commands. (No expansion: `$(…)` stays text, which only other
/// programs' commands use.)
fn tokens(line: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let flush = |word: &mut String, in_word: &mut bool, out: &mut Vec<Token>| {
        if *in_word {
            out.push(Token::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            ' ' | '\t' => flush(&mut word, &mut in_word, &mut out),
            '&' if chars.peek() == Some(&'&') => {
                chars.next();
                flush(&mut word, &mut in_word, &mut out);
                out.push(Token::Op("&&"));
            }
            '|' => {
                flush(&mut word, &mut in_word, &mut out);
                if chars.peek() == Some(&'|') {
                    chars.next();
                    out.push(Token::Op("||"));
                } else {
                    out.push(Token::Op("|"));
                }
            }
            ';' => {
                flush(&mut word, &mut in_word, &mut out);
                out.push(Token::Op(";"));
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    flush(&mut word, &mut in_word, &mut out);
    out
}

/// The `pilotd` commands of one shell line (other programs' are dropped).
fn commands(doc: &str, line: usize, text: &str) -> Vec<Shown> {
    let mut shown = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut first_stage = true;
    let mut toks = tokens(text).into_iter();
    loop {
        let tok = toks.next();
        let end = match &tok {
            Some(Token::Word(w)) => {
                words.push(w.clone());
                continue;
            }
            Some(Token::Op(op)) => Some(*op),
            None => None,
        };
        if let Some(s) = pilotd(doc, line, text, std::mem::take(&mut words)) {
            assert!(
                first_stage,
                "{doc}:{line}: `{text}` pipes into pilotd, which this test cannot feed"
            );
            shown.push(s);
        }
        match end {
            None => break,
            Some(op) => first_stage = op != "|",
        }
    }
    shown
}

/// One simple command, if it is `pilotd`'s: its words after the program, and `> FILE`.
fn pilotd(doc: &str, line: usize, text: &str, mut words: Vec<String>) -> Option<Shown> {
    while words.first().is_some_and(|w| w == "sudo") {
        words.remove(0);
    }
    let program = words.first()?.clone();
    let args = if program == "pilotd" || program.ends_with("/pilotd") {
        words.split_off(1)
    } else if program == "cargo" && words.get(1).is_some_and(|w| w == "run") {
        // `cargo run [--release] -- ARGS` in the repository runs pilotd with ARGS.
        let dashes = words.iter().position(|w| w == "--")?;
        words.split_off(dashes + 1)
    } else {
        return None;
    };
    let mut kept = Vec::new();
    let mut stdout_to = None;
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let target = match a.as_str() {
            ">" | ">>" | "1>" => args.next(),
            a if a.starts_with('>') || a.starts_with("1>") => Some(
                a.trim_start_matches('1')
                    .trim_start_matches('>')
                    .to_string(),
            ),
            // stderr redirections do not change what the command does
            a if a.starts_with("2>") => continue,
            _ => {
                kept.push(a);
                continue;
            }
        };
        stdout_to = target.filter(|t| t != "/dev/null");
    }
    Some(Shown {
        doc: doc.to_string(),
        line,
        text: text.to_string(),
        args: kept,
        stdout_to,
        shows_failure: false,
    })
}

#[test]
fn the_reader_of_shell_lines_splits_as_sh_would() {
    let shown = commands(
        "d",
        1,
        "sudo target/release/pilotd check && sudo target/release/pilotd plan   # a comment",
    );
    let args: Vec<_> = shown.iter().map(|s| s.args.join(" ")).collect();
    assert_eq!(args, ["check", "plan"]);

    let shown = commands("d", 1, "pilotd completions bash | sudo tee /x >/dev/null");
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].args, ["completions", "bash"]);

    let shown = commands(
        "d",
        1,
        "pilotd import-ini osg_provisioner.conf > pilotd.toml # x",
    );
    assert_eq!(shown[0].args, ["import-ini", "osg_provisioner.conf"]);
    assert_eq!(shown[0].stdout_to.as_deref(), Some("pilotd.toml"));

    let shown = commands(
        "d",
        1,
        "cargo run --release -- plan --policy policies/default.toml",
    );
    assert_eq!(shown[0].args, ["plan", "--policy", "policies/default.toml"]);
    assert_eq!(shown[0].verb(), Some("plan"));
    assert!(shown[0].names("--policy", None));

    let shown = commands(
        "d",
        1,
        "pilotd -c pilotd.toml --policy p.toml plan --format json",
    );
    assert_eq!(shown[0].verb(), Some("plan"));
    assert!(shown[0].names("--config", Some("-c")));

    // Other programs, quoted operators and `#` inside words are not pilotd commands.
    assert!(commands("d", 1, "docker exec -u alice ap sh -c 'a > j && pilotd x'").is_empty());
    assert!(commands("d", 1, "journalctl -u pilotd WORKER=pilotd-#1").is_empty());
}

#[test]
fn blocks_take_scripts_whole_and_transcripts_after_the_prompt() {
    let md = [
        "text `pilotd nope`",
        "",
        "```sh",
        "pilotd check \\",
        "  --policy p.toml",
        "```",
        "",
        "   ```",
        "   $ pilotd plan",
        "   pilotd schedule (output)",
        "   $ pilotd check",
        "   pilotd: p.toml:1:1: bad",
        "   ```",
        "",
        "```toml",
        "pilotd = 1",
        "```",
    ]
    .join("\n");
    let blocks = blocks("d.md", &md);
    let all: Vec<(usize, String, bool)> = blocks
        .iter()
        .flatten()
        .map(|s| (s.line, s.args.join(" "), s.shows_failure))
        .collect();
    assert_eq!(
        all,
        [
            (4, "check --policy p.toml".to_string(), false),
            (9, "plan".to_string(), false),
            (11, "check".to_string(), true)
        ]
    );
}
