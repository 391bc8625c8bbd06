//! A Sentinel-monitored set: one primary, replicas, and sentinels, all real
//! `redis-server` processes on free loopback ports.
//!
//! The replicas replicate through one [`FaultProxy`], so that a test can hold
//! replication back ([`SentinelSet::hold_replication`]) and make a write
//! reach the primary only: killed then, the primary takes it with it. The
//! sentinels run with `down-after-milliseconds 500` and `failover-timeout
//! 2000`, quorum 2.
//!
//! The sentinels see replicas whose master port (the proxy's) is not the
//! primary's: they reconfigure them to the primary (`+fix-slave-config`)
//! once they look at the replicas again with the primary healthy (every
//! 10 s, or during a manual failover). Hold replication and kill the primary
//! within a few seconds of [`SentinelSet::start`]; for a manual failover use
//! [`SentinelSet::start_direct`].

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::{IntoConnectionInfo, Value};

use super::{FaultProxy, ProxyMode, RedisServer, free_port, server_bin};

/// The name of the monitored set.
pub const MASTER_NAME: &str = "mymaster";
const DOWN_AFTER_MS: u64 = 500;
const FAILOVER_TIMEOUT_MS: u64 = 2000;
/// How long the set may take to form (replication up, sentinels know each
/// other and both replicas).
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// Passwords of the set: the sentinels' own, and the data nodes'.
#[derive(Debug, Clone)]
pub struct Passwords {
    pub sentinel: String,
    pub primary: String,
}

/// One `redis-server --sentinel` process.
pub struct SentinelProcess {
    port: u16,
    dir: PathBuf,
    password: Option<String>,
    child: Option<Child>,
}

impl SentinelProcess {
    fn start(
        primary_port: u16,
        passwords: Option<&Passwords>,
        dir: PathBuf,
    ) -> Result<SentinelProcess, String> {
        let port = free_port();
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile {dir}/sentinel.log\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            dir = dir.display()
        );
        if let Some(p) = passwords {
            conf.push_str(&format!(
                "requirepass {s}\nsentinel sentinel-pass {s}\nsentinel auth-pass {MASTER_NAME} {p}\n",
                s = p.sentinel,
                p = p.primary
            ));
        }
        let path = dir.join("sentinel.conf");
        std::fs::write(&path, conf).map_err(|e| format!("write {}: {e}", path.display()))?;
        let output = std::fs::File::create(dir.join("stderr.log")).map_err(|e| e.to_string())?;
        let output2 = output.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(server_bin())
            .arg(&path)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::from(output))
            .stderr(Stdio::from(output2))
            .spawn()
            .map_err(|e| format!("spawn sentinel: {e}"))?;
        let mut sentinel = SentinelProcess {
            port,
            dir,
            password: passwords.map(|p| p.sentinel.clone()),
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(child) = &mut sentinel.child
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!(
                    "sentinel on {port} exited: {status}\n{}",
                    sentinel.log_tail()
                ));
            }
            if sentinel.cmd(&["PING"]).is_ok() {
                return Ok(sentinel);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "sentinel on {port} not ready\n{}",
                    sentinel.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// One command on a fresh connection (authenticated if needed).
    pub fn cmd(&self, args: &[&str]) -> redis::RedisResult<Value> {
        let info = format!("redis://127.0.0.1:{}", self.port).into_connection_info()?;
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if let Some(pw) = &self.password {
            settings = settings.set_password(pw);
        }
        let client = redis::Client::open(info.set_redis_settings(settings))?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut con)
    }

    /// The primary this sentinel names now.
    pub fn primary_port(&self) -> Option<u16> {
        let reply = self
            .cmd(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME])
            .ok()?;
        match reply {
            Value::Array(items) => match items.get(1) {
                Some(Value::BulkString(port)) => std::str::from_utf8(port).ok()?.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }

    /// A field of `SENTINEL MASTER mymaster`.
    fn master_field(&self, field: &str) -> Option<String> {
        let reply = self.cmd(&["SENTINEL", "MASTER", MASTER_NAME]).ok()?;
        let items: Vec<String> = match reply {
            Value::Array(items) => items.iter().map(super::server::value_to_string).collect(),
            Value::Map(pairs) => pairs
                .iter()
                .flat_map(|(k, v)| {
                    [
                        super::server::value_to_string(k),
                        super::server::value_to_string(v),
                    ]
                })
                .collect(),
            _ => return None,
        };
        items
            .chunks(2)
            .find(|pair| pair[0] == field)
            .and_then(|pair| pair.get(1).cloned())
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default()
            + &std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One primary, `replicas` replicas (through a proxy), three sentinels.
pub struct SentinelSet {
    nodes: Vec<RedisServer>,
    sentinels: Vec<SentinelProcess>,
    proxy: FaultProxy,
    passwords: Option<Passwords>,
    /// The sentinels' config dirs live under it.
    base: PathBuf,
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        self.sentinels.clear();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

impl SentinelSet {
    /// 1 primary + 2 replicas + 3 sentinels, no passwords.
    pub fn start() -> SentinelSet {
        SentinelSet::start_with(None)
    }

    /// Like [`start`](Self::start), with passwords (`requirepass` on the data
    /// nodes and on the sentinels).
    pub fn start_with(passwords: Option<Passwords>) -> SentinelSet {
        SentinelSet::start_inner(passwords, true)
    }

    /// Replicas replicating from the primary directly (no
    /// [`hold_replication`](Self::hold_replication)).
    pub fn start_direct() -> SentinelSet {
        SentinelSet::start_inner(None, false)
    }

    fn start_inner(passwords: Option<Passwords>, via_proxy: bool) -> SentinelSet {
        let mut auth: Vec<String> = Vec::new();
        if let Some(p) = &passwords {
            auth = vec![
                "--requirepass".into(),
                p.primary.clone(),
                "--masterauth".into(),
                p.primary.clone(),
            ];
        }
        let mut args: Vec<String> = vec!["--repl-diskless-sync-delay".into(), "0".into()];
        args.extend(auth.iter().cloned());
        let primary = RedisServer::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let proxy = FaultProxy::start(primary.port());
        let proxy_port = if via_proxy {
            proxy.port()
        } else {
            primary.port()
        }
        .to_string();
        let mut nodes = vec![primary];
        for _ in 0..2 {
            let mut args: Vec<String> = vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                proxy_port.clone(),
                "--repl-diskless-sync-delay".into(),
                "0".into(),
            ];
            args.extend(auth.iter().cloned());
            nodes.push(RedisServer::start_with(
                &args.iter().map(String::as_str).collect::<Vec<_>>(),
            ));
        }
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            let info = nodes[0].info("replication");
            if info.matches("state=online").count() == 2 {
                break;
            }
            assert!(Instant::now() < deadline, "replication not up:\n{info}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let primary_port = nodes[0].port();
        let base = std::env::temp_dir().join(format!(
            "leasehold-sentinel-{}-{primary_port}",
            std::process::id()
        ));
        let sentinels: Vec<SentinelProcess> = (0..3)
            .map(|i| {
                let dir = base.join(i.to_string());
                std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
                SentinelProcess::start(primary_port, passwords.as_ref(), dir)
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        // Sentinels must know each other (to elect a leader) and both replicas.
        loop {
            let formed = sentinels.iter().all(|s| {
                s.master_field("num-other-sentinels").as_deref() == Some("2")
                    && s.master_field("num-slaves").as_deref() == Some("2")
            });
            if formed {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "sentinels did not form:\n{}",
                sentinels[0].log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        SentinelSet {
            nodes,
            sentinels,
            proxy,
            passwords,
            base,
        }
    }

    /// The sentinels' URLs, with the passwords (the primary's in the query).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| match &self.passwords {
                Some(p) => format!(
                    "redis://:{}@127.0.0.1:{}?primary_password={}",
                    p.sentinel,
                    s.port(),
                    p.primary
                ),
                None => format!("redis://127.0.0.1:{}", s.port()),
            })
            .collect()
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(SentinelProcess::port).collect()
    }

    /// The primary the sentinels name now (the first that answers).
    pub fn primary_port(&self) -> u16 {
        self.sentinels
            .iter()
            .find_map(SentinelProcess::primary_port)
            .unwrap_or_else(|| panic!("no sentinel names a primary"))
    }

    /// The ports of the data nodes that are not the primary now.
    pub fn replica_ports(&self) -> Vec<u16> {
        let primary = self.primary_port();
        self.nodes
            .iter()
            .filter(|n| n.is_running() && n.port() != primary)
            .map(RedisServer::port)
            .collect()
    }

    /// The data node on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no data node on {port}"))
    }

    /// Stop forwarding replication: writes from now on reach the primary only.
    /// The replicas must still replicate through the proxy: see the module
    /// docs.
    pub fn hold_replication(&self) {
        self.proxy.set_mode(ProxyMode::Blackhole);
    }

    /// Whether every running replica still replicates through the proxy
    /// (so that [`hold_replication`](Self::hold_replication) holds its
    /// writes back): `false` once the sentinels pointed one at the primary
    /// directly, or for a set from [`start_direct`](Self::start_direct).
    pub fn replication_held_back(&self) -> bool {
        let proxy_port = self.proxy.port().to_string();
        let primary = self.primary_port();
        self.nodes
            .iter()
            .filter(|n| n.is_running() && n.port() != primary)
            .all(|n| {
                let info = n.info("replication");
                super::server::info_lookup(&info, "master_port") == Some(proxy_port.as_str())
            })
    }

    /// Points every running replica back at the proxy (`REPLICAOF`), with
    /// the proxy passing traffic, and waits until each is in sync through
    /// it (30 s, then panics): undoes the sentinels' `+fix-slave-config`,
    /// for [`hold_replication`](Self::hold_replication) to work again for
    /// several seconds.
    pub fn replicate_through_proxy(&self) {
        self.proxy.set_mode(ProxyMode::Pass);
        let proxy_port = self.proxy.port().to_string();
        let primary = self.primary_port();
        let replicas: Vec<&RedisServer> = self
            .nodes
            .iter()
            .filter(|n| n.is_running() && n.port() != primary)
            .collect();
        for replica in &replicas {
            replica.cmd(&["REPLICAOF", "127.0.0.1", &proxy_port]);
        }
        let deadline = Instant::now() + FORM_TIMEOUT;
        for replica in &replicas {
            loop {
                let info = replica.info("replication");
                let lookup = |f| super::server::info_lookup(&info, f).map(str::to_owned);
                if lookup("master_port").as_deref() == Some(proxy_port.as_str())
                    && lookup("master_link_status").as_deref() == Some("up")
                {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "replica {} not in sync through the proxy:\n{info}",
                    replica.port()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// `kill -9` the current primary; returns its port.
    pub fn kill_primary(&mut self) -> u16 {
        let port = self.primary_port();
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no data node on {port}"));
        node.stop();
        port
    }

    /// `SENTINEL FAILOVER`: the primary stays up and is demoted to a
    /// replica once a replica is promoted. Returns the old primary's port.
    pub fn manual_failover(&self) -> u16 {
        let port = self.primary_port();
        let reply = self.sentinels[0].cmd(&["SENTINEL", "FAILOVER", MASTER_NAME]);
        assert!(reply.is_ok(), "SENTINEL FAILOVER: {reply:?}");
        port
    }

    /// Waits until every sentinel names a primary other than `old` that says
    /// `ROLE` master; returns its port.
    pub fn wait_for_failover(&self, old: u16, timeout: Duration) -> u16 {
        let deadline = Instant::now() + timeout;
        loop {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(SentinelProcess::primary_port)
                .collect();
            if let Some(Some(new)) = named.first()
                && *new != old
                && named.iter().all(|n| *n == Some(*new))
                && self.is_primary(*new)
            {
                return *new;
            }
            assert!(
                Instant::now() < deadline,
                "no failover within {timeout:?} (sentinels name {named:?})\n{}",
                self.sentinels[0].log_tail()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until every sentinel names the same primary, it is one, and it
    /// has `replicas` replicas online (after a failover Sentinel points the
    /// remaining replicas at the new primary, and each may need a resync
    /// first); returns that primary and how long it took. The primary may
    /// not be the one the failover promoted: on a loaded machine the
    /// sentinels have failed over again, between the survivors, when the
    /// new primary stalled past `down-after-milliseconds` (a CI run on
    /// Valkey 8.1 saw three more within 3 s).
    pub fn wait_for_online_replicas(&self, replicas: usize, timeout: Duration) -> (u16, Duration) {
        let started = Instant::now();
        loop {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .map(SentinelProcess::primary_port)
                .collect();
            let agreed = match named.first() {
                Some(Some(port)) if named.iter().all(|n| *n == Some(*port)) => Some(*port),
                _ => None,
            };
            let info = agreed
                .filter(|&port| self.is_primary(port))
                .map(|port| (port, self.node(port).info("replication")));
            if let Some((port, info)) = &info
                && info.matches("state=online").count() >= replicas
            {
                return (*port, started.elapsed());
            }
            assert!(
                started.elapsed() < timeout,
                "{replicas} replica(s) not online on the primary within {timeout:?} \
                 (sentinels name {named:?}):\n{info:?}\n{}",
                self.sentinels[0].log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn is_primary(&self, port: u16) -> bool {
        match self.node(port).cmd_result(&["ROLE"]) {
            Ok(Value::Array(items)) => {
                matches!(items.first(), Some(Value::BulkString(r)) if r == b"master")
            }
            _ => false,
        }
    }
}
