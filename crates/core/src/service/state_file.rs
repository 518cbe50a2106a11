//! State files (the status, the history, the last good manifest, the back-off book) are
//! replaced whole: written to a temporary file beside them, synced, renamed over the old one,
//! and the directory synced. A reader or a crash sees the old file or the new one, never half
//! of one. The JSON ones are each a `Store`, which also says what a missing, unreadable or
//! damaged file reads as.
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
pub(crate) fn create_fresh(path: &Path, mode: u32) -> std::io::Result<std::fs::File> {
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

/// Reading, writing or removing a state file failed: what the file is to the owner
/// ("availability history"), where it is, and why.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("cannot read the {0} in {path}: {2}", path = .1.display())]
    Read(&'static str, PathBuf, #[source] std::io::Error),
    /// Not what pilotd writes: cut short, another version or shape.
    #[error("the {0} in {path} is damaged: {2}", path = .1.display())]
    Damaged(&'static str, PathBuf, String),
    #[error("cannot write the {0} in {path}: {2}\n  hint: pilotd needs to write its state files (pilotd.toml `state_dir`)", path = .1.display())]
    Write(&'static str, PathBuf, #[source] std::io::Error),
    #[error("cannot remove the {0} in {path}: {2}", path = .1.display())]
    Remove(&'static str, PathBuf, #[source] std::io::Error),
}

/// One JSON state file: where it is, what it is called in messages, the shape it must have
/// beyond parsing, and how it is laid out (compact for the daemon's counters, which it
/// rewrites every few minutes; pretty for files people read).
pub struct Store<T> {
    path: PathBuf,
    what: &'static str,
    check: fn(&T) -> Result<(), String>,
    pretty: bool,
}

impl<T: serde::Serialize + serde::de::DeserializeOwned> Store<T> {
    /// A compact file that holds anything that parses as `T`.
    pub fn new(path: PathBuf, what: &'static str) -> Store<T> {
        Store {
            path,
            what,
            check: |_| Ok(()),
            pretty: false,
        }
    }

    /// Indented, with a final newline.
    pub fn pretty(self) -> Store<T> {
        Store {
            pretty: true,
            ..self
        }
    }

    /// `check` rejects a well-formed file of the wrong version or shape.
    pub fn checked(self, check: fn(&T) -> Result<(), String>) -> Store<T> {
        Store { check, ..self }
    }

    /// The value in the file, `None` when there is none; touches nothing (for readers such
    /// as `status`, and for files whose damage the caller must answer for itself).
    pub fn peek(&self) -> Result<Option<T>, StateFileError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StateFileError::Read(self.what, self.path.clone(), e)),
        };
        let why = match serde_json::from_slice::<T>(&bytes) {
            Ok(v) => match (self.check)(&v) {
                Ok(()) => return Ok(Some(v)),
                Err(why) => why,
            },
            Err(e) => e.to_string(),
        };
        Err(StateFileError::Damaged(self.what, self.path.clone(), why))
    }

    /// The daemon's reading of a file it will write afresh: the value, or `fresh` when the
    /// file is missing, unreadable or damaged, with the warning to log. A damaged file is set
    /// aside as `<name>.corrupt`, so nothing is lost.
    pub fn load_or(&self, fresh: impl FnOnce() -> T) -> (T, Option<String>) {
        self.read_or(fresh, true)
    }

    /// `load_or` that leaves a damaged file where it is (for readers).
    pub fn peek_or(&self, fresh: impl FnOnce() -> T) -> (T, Option<String>) {
        self.read_or(fresh, false)
    }

    fn read_or(&self, fresh: impl FnOnce() -> T, set_aside: bool) -> (T, Option<String>) {
        let e = match self.peek() {
            Ok(Some(v)) => return (v, None),
            Ok(None) => return (fresh(), None),
            Err(e) => e,
        };
        let mut warning = format!("{e}; starting over");
        if matches!(e, StateFileError::Damaged(..)) {
            let backup = self.path.with_added_extension("corrupt");
            warning += &if set_aside && std::fs::rename(&self.path, &backup).is_ok() {
                format!(", the corrupted file is kept as {}", backup.display())
            } else {
                ", the corrupted file is left where it is".into()
            };
        }
        (fresh(), Some(warning))
    }

    /// Replaces the file whole (`write_atomically`).
    pub fn save(&self, value: &T) -> Result<(), StateFileError> {
        let body = match self.pretty {
            true => serde_json::to_vec_pretty(value).map(|b| [&b[..], b"\n"].concat()),
            false => serde_json::to_vec(value),
        };
        body.map_err(std::io::Error::other)
            .and_then(|b| write_atomically(&self.path, &b))
            .map_err(|e| StateFileError::Write(self.what, self.path.clone(), e))
    }

    /// Removes the file; one already gone is fine.
    pub fn remove(&self) -> Result<(), StateFileError> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(StateFileError::Remove(self.what, self.path.clone(), e))
            }
            _ => Ok(()),
        }
    }
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
        // A store sets aside (as damaged) or removes the link at its path, not its target.
        let link = d.path().join("c.json");
        symlink(&victim, &link).unwrap();
        assert!(counter(&link).load_or(Counter::default).1.is_some());
        let aside = std::fs::symlink_metadata(d.path().join("c.json.corrupt")).unwrap();
        assert!(aside.file_type().is_symlink());
        symlink(&victim, &link).unwrap();
        counter(&link).remove().unwrap();
        assert!(!link.exists());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }

    #[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Counter {
        version: u32,
        n: u64,
    }

    fn counter(p: &Path) -> Store<Counter> {
        Store::new(p.to_path_buf(), "test counter").checked(|c| {
            (c.version == 1)
                .then_some(())
                .ok_or("unexpected version".into())
        })
    }

    #[test]
    fn missing_is_none_and_a_save_reads_back_compact_or_pretty() {
        let d = tempfile::tempdir().unwrap();
        let (p, c) = (d.path().join("c.json"), Counter { version: 1, n: 7 });
        assert_eq!(
            counter(&p).load_or(Counter::default),
            (Counter::default(), None)
        );
        counter(&p).save(&c).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), br#"{"version":1,"n":7}"#);
        counter(&p).pretty().save(&c).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text, "{\n  \"version\": 1,\n  \"n\": 7\n}\n");
        assert_eq!(counter(&p).peek().unwrap(), Some(c));
        counter(&p).remove().unwrap();
        assert_eq!(counter(&p).peek().unwrap(), None);
        counter(&p).remove().unwrap();
    }

    #[test]
    fn damaged_is_set_aside_by_load_only_and_unreadable_stays() {
        let d = tempfile::tempdir().unwrap();
        let (p, aside) = (d.path().join("c.json"), d.path().join("c.json.corrupt"));
        for (bytes, why) in [
            (&b"{\"n\":"[..], "EOF"),
            (b"{\"version\":2,\"n\":1}", "unexpected"),
        ] {
            std::fs::write(&p, bytes).unwrap();
            let e = counter(&p).peek().unwrap_err().to_string();
            assert!(e.contains("c.json is damaged") && e.contains(why), "{e}");
            let w = counter(&p).peek_or(Counter::default).1.unwrap();
            assert!(w.ends_with("starting over, the corrupted file is left where it is"));
            assert_eq!(std::fs::read(&p).unwrap(), bytes, "peeking moves nothing");
            let (c, w) = counter(&p).load_or(Counter::default);
            assert_eq!(c, Counter::default());
            assert!(
                w.unwrap()
                    .ends_with(&format!("kept as {}", aside.display()))
            );
            assert_eq!(std::fs::read(&aside).unwrap(), bytes, "nothing is lost");
            assert!(!p.exists());
        }
        // A directory where the file should be: an I/O error (EISDIR), left where it is.
        std::fs::create_dir(&p).unwrap();
        let w = counter(&p).load_or(Counter::default).1.unwrap();
        assert!(
            w.starts_with("cannot read the test counter") && p.is_dir(),
            "{w}"
        );
        let e = counter(&p).save(&Counter::default()).unwrap_err();
        assert!(e.to_string().contains("cannot write the test counter in"));
    }
}
