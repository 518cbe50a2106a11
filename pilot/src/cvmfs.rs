//! Which CVMFS repositories this worker can read, advertised as the OSPool's execution points
//! advertise them, so jobs written for the OSPool (`HAS_CVMFS_oasis_opensciencegrid_org`,
//! `CVMFS_oasis_opensciencegrid_org_REVISION >= N`) match here unchanged.
//!
//! The names follow the OSG pilots' node-advertise script (GlideinWMS / startd-cron mode, as
//! used for the OSPool): `HAS_CVMFS_<repo>` = True and `CVMFS_<repo>_REVISION` = the integer
//! revision, `<repo>` being the repository name with `.` replaced by `_`. That script reads the
//! revision from the mount's `user.revision` extended attribute; here it comes from the
//! repository's `.cvmfspublished` manifest (its `S<revision>` line), with the attribute as the
//! fallback. `-` also becomes `_`, since a ClassAd name cannot hold it.
//!
//! A CVMFS mount can hang (autofs waiting on a fuse daemon, a stuck proxy): every read runs in
//! a thread of its own and is abandoned at the deadline, so the pilot never hangs on one. The
//! probe runs once at start (a required repository that cannot be read fails the self-test,
//! exit 21) and then in the startd cron job every `PILOT_AD_PERIOD`, so a repository autofs
//! mounts later is advertised within one period.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The manifest a repository publishes at its root.
pub const MANIFEST: &str = ".cvmfspublished";
/// Far above a real manifest (a few hundred bytes plus a signature).
const MAX_MANIFEST_BYTES: u64 = 64 * 1024;

/// What to probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub dir: PathBuf,
    /// Repositories to look at; empty: every one listed under `dir`.
    pub repos: Vec<String>,
    /// Repositories that must be readable (probed whether listed or not).
    pub required: Vec<String>,
    pub timeout: Duration,
}

/// One repository's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repo {
    Readable { revision: u64 },
    Unreadable { reason: String },
}

/// The probe's findings: each repository looked at, and whether it was named (in
/// `PILOT_CVMFS_REPOS` or `PILOT_CVMFS_REQUIRED`) or found by listing the directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    pub repos: Vec<(String, Repo, bool)>,
    /// Why the directory could not be listed, when it could not.
    pub listing: Option<String>,
}

/// A CVMFS repository name as it may appear in an attribute: `cms.cern.ch`,
/// `config-osg.opensciencegrid.org`.
pub fn valid_repo_name(name: &str) -> bool {
    name.len() <= 200
        && name
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_alphanumeric)
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// `oasis.opensciencegrid.org` → `oasis_opensciencegrid_org`.
pub fn attr_name(repo: &str) -> String {
    repo.replace(['.', '-'], "_")
}

/// The revision in a `.cvmfspublished` manifest: its `S<revision>` line, in the text before
/// the `--` line that starts the signature.
pub fn parse_revision(manifest: &[u8]) -> Result<u64, String> {
    for line in manifest.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line == b"--" {
            break;
        }
        if let Some(rev) = line.strip_prefix(b"S") {
            return std::str::from_utf8(rev)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| {
                    format!(
                        "its revision line {:?} is not a number",
                        String::from_utf8_lossy(line)
                    )
                });
        }
    }
    Err(format!("{MANIFEST} has no S<revision> line"))
}

/// The `user.revision` extended attribute CVMFS puts on a repository's root.
fn xattr_revision(root: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(root.as_os_str().as_bytes()).ok()?;
    let mut buf = [0u8; 64];
    // SAFETY: both strings are NUL-terminated and buf is valid for buf.len() bytes.
    let n = unsafe {
        nix::libc::getxattr(
            path.as_ptr(),
            c"user.revision".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).ok()?;
    std::str::from_utf8(buf.get(..n)?).ok()?.trim().parse().ok()
}

/// Reads one repository's revision (blocking; run in a thread).
fn read_repo(root: &Path) -> Repo {
    let manifest = root.join(MANIFEST);
    let read = std::fs::File::open(&manifest).and_then(|f| {
        let mut bytes = Vec::new();
        f.take(MAX_MANIFEST_BYTES).read_to_end(&mut bytes)?;
        Ok(bytes)
    });
    let failed = match read {
        Ok(bytes) => match parse_revision(&bytes) {
            Ok(revision) => return Repo::Readable { revision },
            Err(e) => e,
        },
        Err(e) => format!("cannot read {}: {e}", manifest.display()),
    };
    match xattr_revision(root) {
        Some(revision) => Repo::Readable { revision },
        None => Repo::Unreadable { reason: failed },
    }
}

/// Runs `f` in a thread of its own; its answer arrives on the receiver, or never (the thread
/// is left to finish, or to hang, on its own; one that could not start drops its sender).
fn in_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> mpsc::Receiver<T> {
    let (tx, rx) = mpsc::channel();
    let _ = std::thread::Builder::new()
        .name("cvmfs-probe".into())
        .spawn(move || {
            let _ = tx.send(f());
        });
    rx
}

/// Looks at every repository, all in parallel, within `probe.timeout` in all.
pub fn probe(p: &Probe) -> Findings {
    let deadline = Instant::now() + p.timeout;
    let mut findings = Findings::default();
    let mut names: Vec<(String, bool)> = p.repos.iter().map(|r| (r.clone(), true)).collect();
    if p.repos.is_empty() {
        let dir = p.dir.clone();
        let listed = in_thread(move || -> Result<Vec<String>, String> {
            let entries = std::fs::read_dir(&dir).map_err(|e| e.to_string())?;
            Ok(entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect())
        });
        match listed
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .ok()
        {
            Some(Ok(mut found)) => {
                found.sort();
                names.extend(
                    found
                        .into_iter()
                        .filter(|n| valid_repo_name(n))
                        .map(|n| (n, false)),
                );
            }
            Some(Err(e)) => findings.listing = Some(e),
            None => findings.listing = Some(format!("no answer within {:?}", p.timeout)),
        }
    }
    for r in &p.required {
        match names.iter_mut().find(|(n, _)| n == r) {
            Some(entry) => entry.1 = true,
            None => names.push((r.clone(), true)),
        }
    }
    // Every read starts now; each is waited for until the shared deadline.
    let pending: Vec<(String, bool, mpsc::Receiver<Repo>)> = names
        .into_iter()
        .map(|(name, named)| {
            let root = p.dir.join(&name);
            (name, named, in_thread(move || read_repo(&root)))
        })
        .collect();
    for (name, named, rx) in pending {
        let state = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| Repo::Unreadable {
                reason: format!(
                    "reading {} gave no answer within {:?} (a hung mount?)",
                    p.dir.join(&name).join(MANIFEST).display(),
                    p.timeout
                ),
            });
        findings.repos.push((name, state, named));
    }
    findings
}

impl Findings {
    /// The slot-ad lines: `HAS_CVMFS_x = True` and the revision for every readable
    /// repository; `HAS_CVMFS_x = False` for a named one that is not (so a value advertised
    /// earlier does not linger). A directory entry that is no readable repository is left out.
    pub fn ad_lines(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (name, state, named) in &self.repos {
            let attr = attr_name(name);
            match state {
                Repo::Readable { revision } => {
                    out.push((format!("HAS_CVMFS_{attr}"), "True".to_owned()));
                    out.push((format!("CVMFS_{attr}_REVISION"), revision.to_string()));
                }
                Repo::Unreadable { .. } if *named => {
                    out.push((format!("HAS_CVMFS_{attr}"), "False".to_owned()));
                }
                Repo::Unreadable { .. } => {}
            }
        }
        out
    }

    /// Required repositories that could not be read, with why.
    pub fn missing<'a>(&'a self, required: &'a [String]) -> Vec<(&'a str, &'a str)> {
        required
            .iter()
            .filter_map(|r| match self.repos.iter().find(|(n, _, _)| n == r) {
                Some((_, Repo::Readable { .. }, _)) => None,
                Some((_, Repo::Unreadable { reason }, _)) => Some((r.as_str(), reason.as_str())),
                None => Some((r.as_str(), "it was not probed")),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST_TEXT: &[u8] = b"C600230b0ba7620426f2e898f1e1f43c5466efe59\nB1234\nRd41d8cd98f00b204e9800998ecf8427e\nD240\nS4711\nGno\nNoasis.opensciencegrid.org\nT1596046810\n--\n\x00\x01S999\xff";

    fn repo(dir: &Path, name: &str, manifest: &[u8]) {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join(MANIFEST), manifest).unwrap();
    }

    #[test]
    fn the_revision_is_the_s_line_before_the_signature() {
        assert_eq!(parse_revision(MANIFEST_TEXT), Ok(4711));
        assert_eq!(parse_revision(b"C1\r\nS12\r\n--\r\n"), Ok(12));
        // Only after the signature marker: not the revision.
        assert!(parse_revision(b"C1\n--\nS5\n").is_err());
        assert!(
            parse_revision(b"Sabc\n")
                .unwrap_err()
                .contains("not a number")
        );
        assert!(parse_revision(b"").is_err());
    }

    #[test]
    fn names_become_ospool_attributes() {
        assert_eq!(
            attr_name("oasis.opensciencegrid.org"),
            "oasis_opensciencegrid_org"
        );
        assert_eq!(
            attr_name("config-osg.opensciencegrid.org"),
            "config_osg_opensciencegrid_org"
        );
        for bad in ["", ".hidden", "a b", "a/b", "x=y", "lost+found", "ü.org"] {
            assert!(!valid_repo_name(bad), "{bad:?}");
        }
        assert!(valid_repo_name("cms.cern.ch"));
    }

    #[test]
    fn listed_named_and_required_repositories_are_advertised() {
        let dir = tempfile::tempdir().unwrap();
        repo(dir.path(), "oasis.opensciencegrid.org", MANIFEST_TEXT);
        repo(dir.path(), "cms.cern.ch", b"S3\n");
        std::fs::create_dir(dir.path().join("not-a-repo")).unwrap();
        std::fs::create_dir(dir.path().join("lost+found")).unwrap();
        let mut p = Probe {
            dir: dir.path().to_path_buf(),
            repos: vec![],
            required: vec!["cms.cern.ch".into()],
            timeout: Duration::from_secs(5),
        };
        let found = probe(&p);
        let lines: Vec<String> = found
            .ad_lines()
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect();
        assert_eq!(
            lines,
            vec![
                "HAS_CVMFS_cms_cern_ch = True",
                "CVMFS_cms_cern_ch_REVISION = 3",
                "HAS_CVMFS_oasis_opensciencegrid_org = True",
                "CVMFS_oasis_opensciencegrid_org_REVISION = 4711",
            ]
        );
        assert!(found.missing(&p.required).is_empty());

        // Named: only those, and a missing named one is advertised False.
        p.repos = vec![
            "oasis.opensciencegrid.org".into(),
            "gone.example.org".into(),
        ];
        p.required = vec!["gone.example.org".into()];
        let found = probe(&p);
        let lines: Vec<String> = found
            .ad_lines()
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect();
        assert_eq!(
            lines,
            vec![
                "HAS_CVMFS_oasis_opensciencegrid_org = True",
                "CVMFS_oasis_opensciencegrid_org_REVISION = 4711",
                "HAS_CVMFS_gone_example_org = False",
            ]
        );
        let missing = found.missing(&p.required);
        assert_eq!(missing.len(), 1);
        assert!(
            missing[0].1.contains("gone.example.org/.cvmfspublished"),
            "{}",
            missing[0].1
        );
    }

    #[test]
    fn no_cvmfs_directory_advertises_nothing() {
        let p = Probe {
            dir: PathBuf::from("/nonexistent/cvmfs"),
            repos: vec![],
            required: vec![],
            timeout: Duration::from_secs(2),
        };
        let found = probe(&p);
        assert!(found.ad_lines().is_empty());
        assert!(found.listing.is_some());
    }

    #[test]
    fn a_hung_read_is_abandoned_at_the_deadline() {
        // A FIFO nobody writes: open() blocks for ever, as a read on a hung mount does.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("hung.example.org")).unwrap();
        nix::unistd::mkfifo(
            &dir.path().join("hung.example.org").join(MANIFEST),
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        repo(dir.path(), "ok.example.org", b"S1\n");
        let p = Probe {
            dir: dir.path().to_path_buf(),
            repos: vec!["hung.example.org".into(), "ok.example.org".into()],
            required: vec!["hung.example.org".into()],
            timeout: Duration::from_millis(500),
        };
        let start = Instant::now();
        let found = probe(&p);
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        let missing = found.missing(&p.required);
        assert!(missing[0].1.contains("no answer within"), "{missing:?}");
        assert!(
            found
                .ad_lines()
                .contains(&("HAS_CVMFS_ok_example_org".into(), "True".into()))
        );
        // Unblock the abandoned reader so the test leaves no thread behind.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("hung.example.org").join(MANIFEST));
    }
}
