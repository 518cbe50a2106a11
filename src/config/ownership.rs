//! Who may change the files a root daemon takes orders from (sshd's StrictModes): pilotd.toml
//! and the owner's policy must be root's and writable by nobody else; the pool token must
//! exist, be root's, and be readable by neither others nor anyone who could swap it. Each
//! refusal says what `chown`/`chmod` to run.

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

/// Root's, and writable by neither its group nor others; `mode` is the mode the hint asks for.
pub fn only_root_writes(path: &Path, what: &str, mode: &str) -> Result<(), ConfigError> {
    let m = meta(path, "check the path")?;
    let reason = if m.uid() != 0 {
        format!("{what} is owned by uid {}, not root", m.uid())
    } else if m.mode() & 0o022 != 0 {
        format!(
            "{what} is writable by {} (mode {:o})",
            if m.mode() & 0o002 != 0 {
                "everyone"
            } else {
                "its group"
            },
            m.mode() & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(insecure(path, reason, mode))
}

/// The pool token: present, a regular file, root's, not writable by group or others and not
/// readable by others (whoever reads it can join the pool as this site).
pub fn secret(path: &Path) -> Result<(), ConfigError> {
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
        let e = secret(&dir.path().join("missing")).unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("must exist"), "{e}");
        let e = secret(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
