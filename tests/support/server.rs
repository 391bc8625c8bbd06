//! One server child process (`redis-server`, or the one `LEASEHOLD_REDIS_SERVER` names).

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, IntoConnectionInfo, Value};

/// Ports handed out are in `PORT_LO..PORT_HI`; their bus ports (`+10000`) in
/// `22000..32000`. Both ranges stay below Linux's default ephemeral range
/// (32768..61000), so outgoing connections never steal them, and away from 6379.
const PORT_LO: u16 = 12000;
const PORT_HI: u16 = 22000;
const BUS_OFFSET: u16 = 10000;

/// How long a fresh server may take to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(10);
/// How many fresh ports `start_with` tries before giving up.
const START_ATTEMPTS: usize = 5;
/// How long `restart` keeps retrying when the old port is briefly unavailable.
const RESTART_RETRY: Duration = Duration::from_secs(10);
/// Timeouts of the harness' own sync connections (`cmd`, `info_field`, ...).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `primary_with_replica` waits for the replication link.
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The server binary every server and sentinel of the harness runs:
/// `LEASEHOLD_REDIS_SERVER` (a path, e.g. a Valkey or an older Redis, see
/// `.ci/servers.sh`), else `redis-server` from `PATH`.
pub fn server_bin() -> String {
    std::env::var("LEASEHOLD_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// The cli that forms clusters (`--cluster create`): `LEASEHOLD_REDIS_CLI`,
/// else `redis-cli` from `PATH`.
pub fn cli_bin() -> String {
    std::env::var("LEASEHOLD_REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_owned())
}

/// Ports handed out by this process: never handed out twice, because a stopped
/// server still owns its port (it comes back on it with `restart`).
static TAKEN_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

fn nanos_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A free loopback port `p` such that `p + 10000` (the cluster bus port) is
/// free too. Never 6379, never a port this process already handed out.
pub fn free_port() -> u16 {
    static CURSOR: AtomicU64 = AtomicU64::new(u64::MAX);
    let span = u64::from(PORT_HI - PORT_LO);
    // Start at a pseudo-random place so that test binaries running in parallel
    // (nextest) rarely probe the same ports.
    let seed = (u64::from(std::process::id()).wrapping_mul(7919) ^ (nanos_now() / 1000)) % span;
    let _ = CURSOR.compare_exchange(u64::MAX, seed, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..span {
        let offset = CURSOR.fetch_add(1, Ordering::SeqCst) % span;
        let port = PORT_LO + offset as u16;
        if port == 6379 || port + BUS_OFFSET == 6379 {
            continue;
        }
        let mut taken = TAKEN_PORTS.lock().unwrap_or_else(|e| e.into_inner());
        if taken.contains(&port) {
            continue;
        }
        if port_is_free(port) && port_is_free(port + BUS_OFFSET) {
            taken.insert(port);
            return port;
        }
    }
    panic!("free_port: no free port pair in {PORT_LO}..{PORT_HI} (+{BUS_OFFSET})");
}

fn unique_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!(
        "leasehold-redis-{}-{}-{}",
        std::process::id(),
        n,
        nanos_now()
    ));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create temp dir {}: {e}", dir.display()));
    dir
}

/// The last `lines` lines of a file, or a note saying why there are none.
fn file_tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(no log at {}: {e})", path.display()),
    }
}

/// Why a spawned server did not become ready.
#[derive(Debug)]
enum NotReady {
    /// The process exited (typically: port already in use).
    Exited(ExitStatus),
    /// Something answered on the port, but it is another process.
    Foreign(u32),
    /// No answer within the timeout.
    Timeout(String),
}

/// One `redis-server` process on `127.0.0.1`, with its own temp dir.
///
/// Dropping it kills the process (SIGKILL), waits for it and removes the dir.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    extra_args: Vec<String>,
    password: Option<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// A fresh server on a free port, no persistence.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Like [`RedisServer::start`], with extra `redis-server` arguments, e.g.
    /// `&["--requirepass", "s3cret"]` or `&["--cluster-enabled", "yes"]`.
    ///
    /// When `--requirepass` is among them, the harness' own helpers (`cmd`,
    /// `info_field`, ...) authenticate with it; `url()` stays password-less.
    pub fn start_with(extra_args: &[&str]) -> RedisServer {
        let password = extra_args
            .windows(2)
            .rev()
            .find(|w| w[0].eq_ignore_ascii_case("--requirepass"))
            .map(|w| w[1].to_owned());
        let mut server = RedisServer {
            port: 0,
            dir: unique_dir(),
            extra_args: extra_args.iter().map(|s| (*s).to_owned()).collect(),
            password,
            child: None,
        };
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            server.port = free_port();
            let mut child = server.spawn();
            match server.wait_ready(&mut child, READY_TIMEOUT) {
                Ok(()) => {
                    server.child = Some(child);
                    return server;
                }
                Err(why) => {
                    kill_and_reap(&mut child);
                    failures.push(format!("port {}: {why:?}", server.port));
                }
            }
        }
        panic!(
            "redis-server did not start after {START_ATTEMPTS} attempts ({}); args {:?}\n--- tail of {} ---\n{}",
            failures.join("; "),
            server.extra_args,
            server.log_path().display(),
            server.log_tail(30)
        );
    }

    /// The TCP port (stays the same across `stop`/`restart`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`, without password even if `--requirepass` was given.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's temp dir (log file `redis.log`, `nodes.conf` for cluster nodes).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// The last `lines` lines of the server's log, preceded by anything it
    /// printed on stdout/stderr (config errors), for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let early = file_tail(&self.dir.join("stderr.log"), lines);
        let log = file_tail(&self.log_path(), lines);
        if early.trim().is_empty() || early.starts_with("(no log") {
            log
        } else {
            format!("{early}\n{log}")
        }
    }

    /// The pid of the running process, `None` while stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is running (possibly paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL the process, wait until it is gone, and start it again on the
    /// same port with the same arguments; returns once it answers PING. All
    /// data is lost (no persistence; a cluster node keeps its `nodes.conf`).
    /// Also brings a [`stop`](RedisServer::stop)ped server back.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + RESTART_RETRY;
        let mut failures = Vec::new();
        loop {
            let mut child = self.spawn();
            match self.wait_ready(&mut child, READY_TIMEOUT) {
                Ok(()) => {
                    self.child = Some(child);
                    return;
                }
                Err(why) => {
                    kill_and_reap(&mut child);
                    failures.push(format!("{why:?}"));
                    if Instant::now() >= deadline {
                        panic!(
                            "redis-server could not restart on port {} ({}); args {:?}\n--- tail of {} ---\n{}",
                            self.port,
                            failures.join("; "),
                            self.extra_args,
                            self.log_path().display(),
                            self.log_tail(30)
                        );
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// SIGKILL the process and wait until it is gone. `url()` stays the same,
    /// so clients see a server that is down; `restart()` brings it back.
    pub fn stop(&mut self) {
        self.kill();
    }

    /// SIGSTOP: the server stops answering; its connections stay open.
    /// Returns once the process is stopped. No-op while stopped.
    pub fn pause(&self) {
        self.signal_and_wait(libc::SIGSTOP, true);
    }

    /// SIGCONT: undo [`pause`](RedisServer::pause). No-op while stopped.
    pub fn resume(&self) {
        self.signal_and_wait(libc::SIGCONT, false);
    }

    /// One command on a fresh sync connection. Panics with a clear message on
    /// any error (connection or server error). For tests only.
    pub fn cmd(&self, args: &[&str]) -> Value {
        self.cmd_result(args)
            .unwrap_or_else(|e| panic!("redis 127.0.0.1:{} {:?} failed: {e}", self.port, args))
    }

    /// One command on a fresh sync connection, returning the error.
    pub fn cmd_result(&self, args: &[&str]) -> redis::RedisResult<Value> {
        assert!(!args.is_empty(), "cmd: empty command");
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        self.query(&cmd)
    }

    /// Runs a prepared command (binary-safe arguments) on a fresh sync connection.
    pub fn query(&self, cmd: &redis::Cmd) -> redis::RedisResult<Value> {
        let mut con = self.connection()?;
        cmd.query(&mut con)
    }

    /// A fresh sync connection (authenticated when `--requirepass` was given,
    /// without `CLIENT SETINFO`), with 10 s read/write timeouts.
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        self.connection_with(CONNECT_TIMEOUT, IO_TIMEOUT)
    }

    fn connection_with(
        &self,
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> redis::RedisResult<redis::Connection> {
        let info = self.url().into_connection_info()?;
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if let Some(pw) = &self.password {
            settings = settings.set_password(pw);
        }
        let client = redis::Client::open(info.set_redis_settings(settings))?;
        let con = client.get_connection_with_timeout(connect_timeout)?;
        con.set_read_timeout(Some(io_timeout))?;
        con.set_write_timeout(Some(io_timeout))?;
        Ok(con)
    }

    /// `INFO <section>` as text.
    pub fn info(&self, section: &str) -> String {
        value_to_string(&self.cmd(&["INFO", section]))
    }

    /// The server's version, `(major, minor, patch)` from `INFO server`
    /// (`redis_version`). Tests whose assertions depend on it say so.
    pub fn version(&self) -> (u32, u32, u32) {
        let text = self.info("server");
        let version = info_lookup(&text, "redis_version")
            .unwrap_or_else(|| panic!("INFO server on port {} has no redis_version", self.port));
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        )
    }

    /// Whether the server is Redis 7 or newer (sharded pub/sub, subcommand
    /// entries in `INFO commandstats`, `CLUSTER ADDSLOTSRANGE`, `DEBUG`
    /// disabled unless enabled).
    pub fn is_redis7(&self) -> bool {
        self.version().0 >= 7
    }

    /// A numeric field of `INFO <section>`, e.g.
    /// `info_field("stats", "total_commands_processed")`. Panics if absent.
    /// (The harness' own connections send no `CLIENT SETINFO`; the `INFO`
    /// itself is counted only after it ran.)
    pub fn info_field(&self, section: &str, field: &str) -> u64 {
        let text = self.info(section);
        let value = info_lookup(&text, field).unwrap_or_else(|| {
            panic!(
                "INFO {section} on port {} has no field {field:?}:\n{text}",
                self.port
            )
        });
        value
            .parse::<u64>()
            .ok()
            .or_else(|| value.parse::<f64>().ok().map(|f| f as u64))
            .unwrap_or_else(|| {
                panic!(
                    "INFO {section} field {field} on port {} is not numeric: {value:?}",
                    self.port
                )
            })
    }

    /// Calls of `command` (lowercase, e.g. `"evalsha"`, `"publish"`,
    /// `"client|setname"`) from `INFO commandstats`; 0 when never called.
    pub fn command_calls(&self, command: &str) -> u64 {
        let text = self.info("commandstats");
        let prefix = format!("cmdstat_{}:", command.to_ascii_lowercase());
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|stats| {
                stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("calls="))
                    .and_then(|n| n.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// `FLUSHALL`.
    pub fn flushall(&self) {
        self.cmd(&["FLUSHALL"]);
    }

    /// `DBSIZE`.
    pub fn dbsize(&self) -> u64 {
        match self.cmd(&["DBSIZE"]) {
            Value::Int(n) => n as u64,
            other => panic!("DBSIZE on port {}: unexpected {other:?}", self.port),
        }
    }

    /// `KEYS pattern`, sorted.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys: Vec<String> = match self.cmd(&["KEYS", pattern]) {
            Value::Array(items) | Value::Set(items) => items.iter().map(value_to_string).collect(),
            other => panic!("KEYS on port {}: unexpected {other:?}", self.port),
        };
        keys.sort();
        keys
    }

    fn spawn(&self) -> Child {
        let log = self.log_path();
        // stdout/stderr go to a file, not the test's output: config errors are
        // printed there, before the log file is opened.
        let output = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("stderr.log"))
            .unwrap_or_else(|e| panic!("cannot create {}/stderr.log: {e}", self.dir.display()));
        let output2 = output
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot dup stderr.log: {e}"));
        Command::new(server_bin())
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--daemonize", "no", "--logfile"])
            .arg(&log)
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(output))
            .stderr(Stdio::from(output2))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", server_bin()))
    }

    /// Polls until the child answers PING on our port and is the one answering.
    fn wait_ready(&self, child: &mut Child, timeout: Duration) -> Result<(), NotReady> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(NotReady::Exited(status));
            }
            let last_err = match self.probe() {
                Ok(pid) if pid == child.id() => return Ok(()),
                Ok(pid) => return Err(NotReady::Foreign(pid)),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(NotReady::Timeout(last_err));
            }
            std::thread::sleep(POLL);
        }
    }

    /// PING, then the answering process' pid (from `INFO server`).
    fn probe(&self) -> Result<u32, String> {
        let mut con = self
            .connection_with(Duration::from_millis(500), Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        let pong = con
            .req_command(&redis::cmd("PING"))
            .map_err(|e| e.to_string())?;
        match pong {
            Value::SimpleString(ref s) if s == "PONG" => {}
            other => return Err(format!("PING answered {other:?}")),
        }
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        info_lookup(&info, "process_id")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| "INFO server without process_id".to_owned())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    fn signal_and_wait(&self, signal: libc::c_int, want_stopped: bool) {
        let Some(child) = &self.child else { return };
        let pid = child.id() as libc::pid_t;
        // SAFETY: plain kill(2) on our own (not yet reaped) child.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            rc,
            0,
            "kill({pid}, {signal}) failed: {}",
            std::io::Error::last_os_error()
        );
        // Wait until the kernel shows the new state (state 'T' = stopped).
        let stat = format!("/proc/{pid}/stat");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let Ok(text) = std::fs::read_to_string(&stat) else {
                return; // no procfs: the signal was sent, good enough
            };
            let state = text
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            let stopped = matches!(state, Some('T') | Some('t'));
            if stopped == want_stopped {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!(
            "redis-server pid {pid} did not become {} after signal {signal}",
            if want_stopped { "stopped" } else { "running" }
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir)
            .field("extra_args", &self.extra_args)
            .finish()
    }
}

/// SIGKILL (works on a SIGSTOPped process too) and reap. Never panics.
fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// `field:value` lookup in INFO text.
pub(crate) fn info_lookup<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k == field).then(|| v.trim())
    })
}

/// Text of a string-ish reply (bulk, simple, verbatim); `Debug` otherwise.
pub(crate) fn value_to_string(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::Okay => "OK".to_owned(),
        Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// A primary and a replica (`--replicaof 127.0.0.1 <primary port>`); returns
/// once the primary shows its replica `state=online` (only then does it
/// count for `WAIT`) and the replica `master_link_status:up`.
///
/// The primary runs with `--repl-diskless-sync-delay 0`: the default waits
/// 5 s for more replicas before the first full sync.
pub fn primary_with_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let deadline = Instant::now() + REPLICATION_TIMEOUT;
    loop {
        let p = primary.info("replication");
        let r = replica.info("replication");
        let connected =
            info_lookup(&p, "connected_slaves") == Some("1") && p.contains("state=online");
        let up = info_lookup(&r, "master_link_status") == Some("up");
        if connected && up {
            // The first acknowledgement after a sync can take up to the
            // replica's 1 s ACK period; wait for it here, once, so that a
            // test's own WAIT measures the steady state.
            primary.cmd(&["SET", "harness:replication-check", "1"]);
            primary.cmd(&["WAIT", "1", "5000"]);
            primary.cmd(&["DEL", "harness:replication-check"]);
            return (primary, replica);
        }
        if Instant::now() >= deadline {
            panic!(
                "replication not up after {REPLICATION_TIMEOUT:?}\n--- primary INFO replication ---\n{p}\n--- replica INFO replication ---\n{r}\n--- replica log ---\n{}",
                replica.log_tail(30)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl RedisServer {
    /// Sends `DEBUG SLEEP <d>` on a fresh connection from a new thread: the
    /// server stops answering everyone for `d`. Join the handle to wait for
    /// the end of the stall. The server must have been started with
    /// `--enable-debug-command yes` (Redis 7 refuses DEBUG otherwise).
    pub fn debug_sleep(&self, d: Duration) -> std::thread::JoinHandle<()> {
        let mut con = self
            .connection_with(CONNECT_TIMEOUT, d + IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("DEBUG SLEEP: no connection to {}: {e}", self.port));
        let port = self.port;
        std::thread::spawn(move || {
            let secs = format!("{:.3}", d.as_secs_f64());
            let reply: redis::RedisResult<Value> =
                redis::cmd("DEBUG").arg("SLEEP").arg(&secs).query(&mut con);
            if let Err(e) = reply {
                panic!("DEBUG SLEEP {secs} on port {port} failed: {e}");
            }
        })
    }
}

/// SIGSTOP any process (not only a server), and wait until the kernel shows
/// it stopped.
pub fn freeze_process(pid: u32) {
    signal_pid_and_wait(pid, libc::SIGSTOP, true);
}

/// SIGCONT: undo [`freeze_process`].
pub fn thaw_process(pid: u32) {
    signal_pid_and_wait(pid, libc::SIGCONT, false);
}

fn signal_pid_and_wait(pid: u32, signal: libc::c_int, want_stopped: bool) {
    let pid = pid as libc::pid_t;
    // SAFETY: plain kill(2) on a child of this process.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {signal}) failed: {}",
        std::io::Error::last_os_error()
    );
    let stat = format!("/proc/{pid}/stat");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let Ok(text) = std::fs::read_to_string(&stat) else {
            return;
        };
        let state = text
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if matches!(state, Some('T') | Some('t')) == want_stopped {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("pid {pid} did not change state after signal {signal}");
}
