//! State files (the status, the history, the last good manifest, the back-off book) are
//! replaced whole: written to a temporary file beside them, synced, renamed over the old one,
//! and the directory synced. A reader or a crash sees the old file or the new one, never half
//! of one.
//!
//! The temporary file has a name no one can predict (pid, a counter and the clock) and is
//! created exclusively without following links: a link planted beside a state file (by
//! anyone who can write the directory) cannot redirect pilotd's write to another file.
//! `rename` replaces a link at the final name itself, never its target.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces `path` with `bytes` (mode 0644), creating its directory when missing.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomically_with_mode(path, bytes, 0o644)
}

/// A fresh file at `path`, never through a link or over an existing file: exclusive create
/// with `O_NOFOLLOW`.
pub fn create_fresh(path: &Path, mode: u32) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
}

/// A temporary name beside `path` that no other writer (or attacker) can guess.
fn temp_beside(dir: &Path, name: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    dir.join(format!(".{name}.{}.{n}.{nanos:x}.tmp", std::process::id()))
}

/// [`write_atomically`] with the final file's mode.
pub fn write_atomically_with_mode(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let tmp = temp_beside(dir, &name);
    let written = create_fresh(&tmp, mode).and_then(|mut f| {
        // The umask may have narrowed the mode at creation.
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // The rename is durable only once the directory is synced.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// What reading a JSON state file found.
#[derive(Debug)]
pub enum Found<T> {
    Missing,
    Good(T),
    /// Could not be read (permissions, I/O): left where it is.
    Unreadable(std::io::Error),
    /// Not what pilotd writes (cut short, another version or shape). `kept` is where it was
    /// set aside (`<name>.corrupt`), so nothing is lost and the next write starts over.
    Corrupted {
        why: String,
        kept: Option<PathBuf>,
    },
}

/// Reads the JSON state file at `path`; `check` rejects a well-formed file of the wrong
/// version or shape. A corrupted file is renamed to `<name>.corrupt` when `set_aside` (the
/// daemon, which will write a fresh one); readers such as `status` leave it alone.
pub fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    check: impl FnOnce(&T) -> Result<(), String>,
    set_aside: bool,
) -> Found<T> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Found::Missing,
        Err(e) => return Found::Unreadable(e),
    };
    let why = match serde_json::from_slice::<T>(&bytes) {
        Ok(v) => match check(&v) {
            Ok(()) => return Found::Good(v),
            Err(why) => why,
        },
        Err(e) => e.to_string(),
    };
    let mut backup = path.as_os_str().to_owned();
    backup.push(".corrupt");
    let backup = PathBuf::from(backup);
    let kept = (set_aside && std::fs::rename(path, &backup).is_ok()).then_some(backup);
    Found::Corrupted { why, kept }
}

/// A JSON state file's value as `read_json` found it, or a fresh one (`fresh`) with the
/// warning to log: `what` names the file for the owner ("availability history"), `afresh`
/// says what begins again ("counting availability from scratch"). The shared reading of the
/// daemon's counters (the history, the presence timeline).
pub fn read_json_or<T: serde::de::DeserializeOwned>(
    path: &Path,
    check: impl FnOnce(&T) -> Result<(), String>,
    set_aside: bool,
    fresh: impl FnOnce() -> T,
    (what, afresh): (&str, &str),
) -> (T, Option<String>) {
    match read_json(path, check, set_aside) {
        Found::Missing => (fresh(), None),
        Found::Good(v) => (v, None),
        Found::Unreadable(e) => (
            fresh(),
            Some(format!("cannot read {}: {e}; {afresh}", path.display())),
        ),
        Found::Corrupted { why, kept } => (
            fresh(),
            Some(format!(
                "{what} {} is corrupted ({why}); starting over{}",
                path.display(),
                kept_as(kept.as_deref())
            )),
        ),
    }
}

/// How a warning says where a corrupted state file was set aside.
pub fn kept_as(kept: Option<&Path>) -> String {
    kept.map(|k| format!(", the old file is kept as {}", k.display()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_whole_and_leaves_no_temporary_behind() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("new/dir/state.json");
        write_atomically(&p, b"one").unwrap();
        write_atomically(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, vec!["state.json"]);
    }

    #[test]
    fn links_planted_beside_or_at_the_file_redirect_nothing() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let p = d.path().join("status.json");
        // The old fixed temporary name, and a link at the file itself.
        symlink(&victim, d.path().join(".status.json.tmp")).unwrap();
        symlink(&victim, &p).unwrap();
        write_atomically(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(
            !std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o644
        );
        write_atomically_with_mode(&p, b"x", 0o600).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A fresh file never opens through a link.
        let e = create_fresh(&d.path().join(".status.json.tmp"), 0o600).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }
}
