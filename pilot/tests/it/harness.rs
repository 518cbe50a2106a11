//! What the tests share: a tiny HTTP server on 127.0.0.1, a scratch condor installation
//! around the fake condor in tests/fake-condor, and running the real `pilot` binary.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the server answers to one request.
#[derive(Clone, Debug)]
pub enum Reply {
    Status(u16, String),
    /// A 200 whose Content-Length is omitted, so only the streamed size shows the body is big.
    Chunked(usize),
    /// Read the request and answer nothing for this long.
    Hang(Duration),
}

/// A scripted HTTP/1.1 server: each path has a list of replies used in order, the last
/// repeated. It counts the requests per path.
pub struct ConfigServer {
    pub port: u16,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl ConfigServer {
    pub fn start(routes: Vec<(&str, Vec<Reply>)>) -> ConfigServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let routes: HashMap<String, Vec<Reply>> =
            routes.into_iter().map(|(p, r)| (p.to_owned(), r)).collect();
        let routes = Arc::new(routes);
        let hits = Arc::new(Mutex::new(HashMap::new()));
        let hits_srv = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let routes = routes.clone();
                let hits = hits_srv.clone();
                std::thread::spawn(move || serve(stream, &routes, &hits));
            }
        });
        ConfigServer { port, hits }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

fn serve(
    mut stream: TcpStream,
    routes: &HashMap<String, Vec<Reply>>,
    hits: &Mutex<HashMap<String, usize>>,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            break;
        }
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_owned();
    let n = {
        let mut h = hits.lock().unwrap();
        let e = h.entry(path.clone()).or_insert(0);
        *e += 1;
        *e
    };
    let reply = routes
        .get(&path)
        .map(|r| r[(n - 1).min(r.len() - 1)].clone())
        .unwrap_or(Reply::Status(404, "not found\n".into()));
    match reply {
        Reply::Status(code, body) => {
            let _ = write!(
                stream,
                "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        Reply::Chunked(size) => {
            let _ = write!(stream, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            let line = "X = 1\n".repeat(1024);
            let mut sent = 0;
            while sent < size {
                if stream.write_all(line.as_bytes()).is_err() {
                    break;
                }
                sent += line.len();
            }
        }
        Reply::Hang(d) => {
            std::thread::sleep(d);
        }
    }
    let _ = stream.flush();
    let mut sink = Vec::new();
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let _ = stream.read_to_end(&mut sink);
}

/// A port on 127.0.0.1 with nothing listening.
pub fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

pub fn fake_condor_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fake-condor")
        .canonicalize()
        .unwrap()
}

/// A throw-away condor installation: condor_config pointing at config.d, a log dir, scratch,
/// a token.
pub struct CondorHome {
    pub dir: tempfile::TempDir,
}

impl CondorHome {
    pub fn new() -> CondorHome {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("config.d")).unwrap();
        std::fs::write(
            root.join("condor_config"),
            format!(
                "# like /etc/condor/condor_config\nLOCAL_CONFIG_DIR = {0}/config.d\n\
                 LOG = {0}/log\nSPOOL = {0}/spool\nLOCK = {0}/lock\n\
                 # condor's user is whoever runs the tests (root in CI)\nCONDOR_IDS = {1}.{2}\n",
                root.display(),
                nix::unistd::geteuid(),
                nix::unistd::getegid()
            ),
        )
        .unwrap();
        std::fs::write(
            root.join("pool.token"),
            "eyJhbGciOiJIUzI1NiJ9.secret.token\n",
        )
        .unwrap();
        CondorHome { dir }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn master_log(&self) -> String {
        std::fs::read_to_string(self.root().join("log/MasterLog")).unwrap_or_default()
    }

    /// The fake master's pid, from its MasterLog banner.
    pub fn master_pid(&self) -> Option<i32> {
        self.master_log()
            .lines()
            .find_map(|l| l.split("** PID = ").nth(1)?.trim().parse().ok())
    }

    /// The pilot command with a complete environment for this home.
    pub fn pilot(&self, config_url: &str, mode: &str) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pilot"));
        let path = format!(
            "{}:{}",
            fake_condor_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let root = self.root();
        cmd.env_clear()
            .env("PATH", path)
            .env("CONDOR_CONFIG", root.join("condor_config"))
            .env("PILOT_CONFIG_URLS", config_url)
            .env("PILOT_ALLOW_HTTP", "1")
            .env("PILOT_TOKEN_FILE", root.join("pool.token"))
            .env("PILOT_TOKEN_DIR", root.join("tokens.d"))
            .env("PILOT_CONDOR_CONFIG_DIR", root.join("config.d"))
            .env("PILOT_SCRATCH", root.join("scratch"))
            .env("PILOT_IDLE_TIMEOUT", "2")
            .env("PILOT_FETCH_TIMEOUT", "3s")
            .env("FAKE_CONDOR_MODE", mode)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }
}

impl CondorHome {
    /// The pilot in PILOT_LOCAL_DIR mode: condor runs from `<root>/local` and the image's
    /// configuration (`<root>/condor_config`) is only included.
    pub fn pilot_local(&self, config_url: &str, mode: &str) -> Command {
        let mut cmd = self.pilot(config_url, mode);
        let local = self.root().join("local");
        cmd.env_remove("PILOT_TOKEN_DIR")
            .env_remove("PILOT_CONDOR_CONFIG_DIR")
            .env_remove("PILOT_SCRATCH")
            .env("PILOT_LOCAL_DIR", &local);
        cmd
    }
}

/// Waits for a child with a deadline; kills it and panics when the deadline passes.
pub fn wait_with_deadline(child: &mut Child, deadline: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("pilot did not exit within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pilot's stderr, for failure messages.
pub fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// Polls until `f` is true or panics after `deadline`.
pub fn eventually(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// True when no process with this pid exists any more (not even a zombie).
pub fn process_gone(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}
