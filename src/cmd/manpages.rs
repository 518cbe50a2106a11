//! `pilotd manpages DIR`: writes roff man pages (pilotd.1 and pilotd-SUBCOMMAND.1) generated
//! from the clap definition, so `man pilotd-plan` documents exactly the flags this binary
//! accepts. The packaging script runs it on the freshly built binary before cargo-deb.

use super::CmdError;
use crate::cli::{Cli, ManpagesArgs};
use clap::CommandFactory;
use std::path::{Path, PathBuf};

/// Writes the pages and returns their paths, one per line, so scripts can see what landed.
pub fn run(args: &ManpagesArgs) -> Result<String, CmdError> {
    let written = write_pages(&args.dir)?;
    Ok(written
        .iter()
        .map(|p| format!("{}\n", p.display()))
        .collect())
}

/// Same pages as `clap_mangen::generate_to`, but keeps the list of files, names the file in
/// every error (a bare "Permission denied" does not say which directory to fix) and adds the
/// sections clap cannot generate to pilotd.1.
pub fn write_pages(dir: &Path) -> Result<Vec<PathBuf>, CmdError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        CmdError::Runtime(format!(
            "cannot create man page directory {}: {e}",
            dir.display()
        ))
    })?;
    // `help` is not a real subcommand and gets no page; building first gives every
    // subcommand its display name (pilotd-plan) and the global flags (-c, --policy).
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    let mut written = Vec::new();
    collect(root, dir, &mut written)?;
    Ok(written)
}

fn collect(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> Result<(), CmdError> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
        collect(sub, dir, written)?;
    }
    let is_root = cmd.get_name() == "pilotd";
    let man = clap_mangen::Man::new(cmd);
    let path = dir.join(man.get_filename());
    let fail = |e: std::io::Error| {
        CmdError::Runtime(format!("cannot write man page {}: {e}", path.display()))
    };
    let mut page = Vec::new();
    man.render(&mut page).map_err(fail)?;
    if is_root {
        page.extend_from_slice(ROOT_EXTRA.as_bytes());
    }
    std::fs::write(&path, page).map_err(fail)?;
    written.push(path);
    Ok(())
}

/// What clap cannot know but an administrator looks for in `man pilotd`: where the files
/// are, what the exit codes mean, and where the rest of the documentation lives.
const ROOT_EXTRA: &str = r#".SH "EXIT STATUS"
.TP
0
Success.
.TP
1
Runtime failure (Docker or a probe failed, a file could not be written).
.TP
2
Bad usage or invalid configuration; \fBpilotd check\fR prints each problem as FILE:LINE:COL.
.SH FILES
.TP
/etc/pilotd/pilotd.toml
Site configuration: mode, policy path, state dir, Docker socket, worker image and environment.
.TP
/etc/pilotd/policy.toml
The owner's policy: when this machine may compute and how much of it. Written by \fBpilotd init\fR.
.TP
/usr/share/pilotd/policies/
Commented example policies.
.TP
/var/lib/pilotd/
State: history, back-off and the workers' scratch directories.
.SH ENVIRONMENT
.TP
PILOTD_CONFIG
Same as \fB--config\fR.
.TP
PILOTD_POLICY
Same as \fB--policy\fR.
.SH "SEE ALSO"
\fBpilotd-check\fR(1), \fBpilotd-plan\fR(1), \fBpilotd-schedule\fR(1), \fBpilotd-init\fR(1),
\fBpilotd-run\fR(1), \fBsystemctl\fR(1), /usr/share/doc/pilotd/README.md and the documents by reader it links to,
/usr/share/doc/pilotd/docs/*.md
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_main_page_and_one_per_subcommand() {
        let dir = tempfile::tempdir().expect("tempdir");
        let written = write_pages(dir.path()).expect("pages");
        let names: Vec<String> = written
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        for want in [
            "pilotd.1",
            "pilotd-check.1",
            "pilotd-plan.1",
            "pilotd-completions.1",
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing in {names:?}"
            );
        }
        assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
        let main = std::fs::read_to_string(dir.path().join("pilotd.1")).expect("pilotd.1");
        assert!(
            main.starts_with(".ie") || main.contains(".TH pilotd"),
            "{main}"
        );
        let plan = std::fs::read_to_string(dir.path().join("pilotd-plan.1")).expect("plan");
        assert!(plan.contains("snapshot"), "plan page lacks --snapshot");
        assert!(main.contains(".SH FILES") && main.contains("/etc/pilotd/policy.toml"));
        assert!(
            !plan.contains(".SH FILES"),
            "only pilotd.1 gets the extra sections"
        );
    }

    #[test]
    fn an_unwritable_directory_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, "x").expect("write");
        let err = write_pages(&file).expect_err("a file is not a directory");
        assert!(err.to_string().contains("not-a-dir"), "{err}");
        assert_eq!(err.exit_code(), 1);
    }
}
