//! Who may change the files a root daemon takes orders from (sshd's StrictModes): pilotd.toml
//! and the owner's policy must be root's and writable by nobody else; the pool token must
//! exist, be root's, and be readable by neither others nor anyone who could swap it. A file
//! is only as safe as the directories that hold it: whoever may write one of them can put
//! another file in its place, so every directory up to `/` must be root's and writable by
//! nobody else, or sticky (as /tmp: there only an entry's owner may rename or remove it).
//! Each refusal says what `chown`/`chmod` to run. `check`, `run` and every reload ask it.

use super::ConfigError;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn meta(path: &Path, hint: &str) -> Result<std::fs::Metadata, ConfigError> {
    std::fs::metadata(path).map_err(|e| ConfigError::Read {
        path: path.to_path_buf(),
        source: e,
        hint: hint.into(),
    })
}

fn insecure(path: &Path, reason: String, mode: &str) -> ConfigError {
    ConfigError::Insecure {
        path: path.to_path_buf(),
        reason,
        hint: format!(
            "only root may be able to change it: run `chown root:root {0} && chmod {mode} {0}`",
            path.display()
        ),
    }
}

/// Who may write what has this mode, besides its owner.
fn writers(mode: u32) -> &'static str {
    if mode & 0o002 != 0 {
        "everyone"
    } else {
        "its group"
    }
}

/// Root's, and writable by neither its group nor others, in directories only root can change;
/// `mode` is the mode the hint asks for.
pub(crate) fn only_root_writes(path: &Path, what: &str, mode: &str) -> Result<(), ConfigError> {
    file_only_root_writes(path, what, mode)?;
    directories_only_root_writes(path, what)
}

/// Every directory from the one holding `path` (its real place: symlinks resolved, so a link
/// into someone's home is judged by the home) up to `/`: root's, and writable by neither its
/// group nor others unless sticky.
fn directories_only_root_writes(path: &Path, what: &str) -> Result<(), ConfigError> {
    let real = std::fs::canonicalize(path).map_err(|e| ConfigError::Read {
        path: path.to_path_buf(),
        source: e,
        hint: "check the path".into(),
    })?;
    for dir in real.ancestors().skip(1) {
        let m = meta(dir, "check the path")?;
        let reason = if m.uid() != 0 {
            format!(
                "the directory {} holding {what} is owned by uid {}, not root: its owner can put another file in its place",
                dir.display(),
                m.uid()
            )
        } else if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
            format!(
                "the directory {} holding {what} is writable by {} (mode {:o}): whoever can write it can put another file in its place",
                dir.display(),
                writers(m.mode()),
                m.mode() & 0o7777
            )
        } else {
            continue;
        };
        return Err(ConfigError::Insecure {
            path: path.to_path_buf(),
            reason,
            hint: format!(
                "only root may be able to change it: run `chown root:root {0} && chmod go-w {0}`, or keep the file elsewhere",
                dir.display()
            ),
        });
    }
    Ok(())
}

/// The file itself: root's, and writable by neither its group nor others.
fn file_only_root_writes(path: &Path, what: &str, mode: &str) -> Result<(), ConfigError> {
    let m = meta(path, "check the path")?;
    let reason = if m.uid() != 0 {
        format!("{what} is owned by uid {}, not root", m.uid())
    } else if m.mode() & 0o022 != 0 {
        format!(
            "{what} is writable by {} (mode {:o})",
            writers(m.mode()),
            m.mode() & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(insecure(path, reason, mode))
}

/// The pool token: present, a regular file, root's, not writable by group or others and not
/// readable by others (whoever reads it can join the pool as this site).
pub(crate) fn secret(path: &Path) -> Result<(), ConfigError> {
    let m = meta(
        path,
        "[worker] token_file names a file that must exist: put the pool token there (`install -m 600 -o root TOKEN PATH`), or remove the key",
    )?;
    if !m.is_file() {
        return Err(ConfigError::Insecure {
            path: path.to_path_buf(),
            reason: "the token file is not a regular file".into(),
            hint: "point [worker] token_file at the file holding the pool token".into(),
        });
    }
    only_root_writes(path, "the pool token", "600")?;
    if m.mode() & 0o004 != 0 {
        return Err(insecure(
            path,
            format!(
                "the pool token is readable by everyone (mode {:o})",
                m.mode() & 0o7777
            ),
            "600",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn with_mode(dir: &Path, name: &str, mode: u32) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "x").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn writable_or_readable_files_are_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let root = nix::unistd::geteuid().is_root();
        let ok = with_mode(dir.path(), "ok", 0o600);
        let world = with_mode(dir.path(), "world", 0o666);
        let group_w = with_mode(dir.path(), "gw", 0o620);
        let readable = with_mode(dir.path(), "readable", 0o644);
        let e = secret(&world).unwrap_err().to_string();
        assert!(
            e.contains("chmod 600") && e.contains("chown root:root"),
            "{e}"
        );
        assert!(secret(&group_w).is_err());
        assert!(
            only_root_writes(&group_w, "x", "644")
                .unwrap_err()
                .to_string()
                .contains("its group")
                || !root
        );
        if root {
            secret(&ok).unwrap();
            let e = secret(&readable).unwrap_err().to_string();
            assert!(e.contains("readable by everyone (mode 644)"), "{e}");
            only_root_writes(&readable, "x", "644").unwrap();
        } else {
            // Not root's: refused whatever the mode.
            assert!(secret(&ok).unwrap_err().to_string().contains("not root"));
        }
        if root {
            // A directory others may write, unless sticky: the file's place is not safe.
            let open = dir.path().join("open");
            std::fs::create_dir(&open).unwrap();
            let inside = with_mode(&open, "policy.toml", 0o644);
            for (mode, refused) in [
                (0o777, true),
                (0o775, true),
                (0o1777, false),
                (0o755, false),
            ] {
                std::fs::set_permissions(&open, std::fs::Permissions::from_mode(mode)).unwrap();
                let r = only_root_writes(&inside, "the owner's policy", "644");
                assert_eq!(r.is_err(), refused, "{mode:o}: {r:?}");
                if let Err(e) = r {
                    let e = e.to_string();
                    assert!(
                        e.contains(&format!(
                            "the directory {} holding the owner's policy is writable by",
                            open.display()
                        )) && e.contains("chmod go-w"),
                        "{e}"
                    );
                }
            }
            // A symlink is judged by where it leads.
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
            let link = dir.path().join("link.toml");
            std::os::unix::fs::symlink(&inside, &link).unwrap();
            assert!(only_root_writes(&link, "x", "644").is_err());
        }
        let e = secret(&dir.path().join("missing")).unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("must exist"), "{e}");
        let e = secret(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
