//! The scenarios: one `#[test]` each, run one at a time (they share two
//! cores with everything else). Each starts a lock server and a data server,
//! optionally a fault proxy in front of the lock server, spawns the worker
//! processes, breaks something while they run, stops them, checks.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::Value;

use crate::checker::{Figures, read_logs};
use crate::clock::{after, now_ns};
use crate::support::{
    FaultProxy, MASTER_NAME, ProxyMode, RedisCluster, RedisServer, SentinelSet, freeze_process,
    thaw_process,
};
use crate::workload::{
    DataKeys, FREEZE_WINDOW, LockTarget, WORKER_ENV, WORKER_TEST, WorkKind, WorkerConfig,
};

/// One scenario at a time.
pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

/// The lease length of every scenario.
pub(crate) const TTL: Duration = Duration::from_secs(1);
/// How long the SIGSTOP scenario keeps its holder frozen.
const FREEZE: Duration = Duration::from_secs(8);
/// A short body.
pub(crate) const SHORT: Duration = Duration::from_millis(10);
/// A body longer than the lease: it needs renewals to finish.
pub(crate) const LONG: Duration = Duration::from_millis(1500);

/// Mostly short bodies, one long one in 16 (the line of waiters is fair:
/// long bodies set the pace of a round).
pub(crate) fn mixed() -> Vec<Duration> {
    let mut bodies = vec![SHORT; 15];
    bodies.push(LONG);
    bodies
}
/// How long workers may take to stop once told to.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// `LEASEHOLD_FAULTS_LONG=1`: more of everything.
pub(crate) fn long_run() -> bool {
    std::env::var("LEASEHOLD_FAULTS_LONG").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `n` in the bounded run, `n * k` in the long run.
pub(crate) fn scaled(n: u32, k: u32) -> u32 {
    if long_run() { n * k } else { n }
}

#[derive(Clone)]
pub(crate) struct Plan {
    pub name: &'static str,
    pub topology: Topology,
    pub workers: usize,
    pub tasks: usize,
    pub ttl: Duration,
    pub bodies: Vec<Duration>,
    /// How many of the workers reach the lock server(s) through the proxies.
    pub via_proxy: usize,
    pub restart_grace: Option<Duration>,
    /// `LockClientBuilder::replica_sync(n, timeout)`.
    pub replica_sync: Option<(usize, Duration)>,
    /// Arguments of the single server or of each Redlock master.
    pub lock_server_args: Vec<&'static str>,
    /// Worker 0 runs one frozen section after this long.
    pub freeze_after: Option<Duration>,
    pub fake_clock: Option<FakeClock>,
    /// Which member of the lock family the workers take.
    pub kind: WorkKind,
}

impl Plan {
    pub fn new(name: &'static str) -> Plan {
        Plan {
            name,
            topology: Topology::Single,
            workers: scaled(4, 2) as usize,
            tasks: scaled(6, 2) as usize,
            ttl: TTL,
            bodies: mixed(),
            via_proxy: 0,
            restart_grace: None,
            replica_sync: None,
            lock_server_args: Vec::new(),
            freeze_after: None,
            fake_clock: None,
            kind: WorkKind::Lock,
        }
    }
}

/// The lock servers of a plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Topology {
    /// One `redis-server` (`connect`), with a fault proxy in front of it
    /// for the first `via_proxy` workers.
    Single,
    /// A primary, 2 replicas and 3 sentinels (`connect_sentinel`);
    /// `held`: the replicas replicate through the set's proxy, so that
    /// [`SentinelSet::hold_replication`] can keep writes on the primary.
    Sentinel { held: bool },
    /// 3 masters (`connect_cluster`, every node as a seed), and with
    /// `replica` a replica of the master of the lock's slot (node 3).
    Cluster { replica: bool },
    /// `masters` independent masters (`connect_redlock`), a fault proxy in
    /// front of each for the first `via_proxy` workers.
    Redlock { masters: usize },
}

/// The running lock servers.
pub(crate) enum Servers {
    Single(RedisServer),
    Sentinel(SentinelSet),
    Cluster(RedisCluster),
    Redlock(Vec<RedisServer>),
}

/// A worker whose clocks run under `faketime` (libfaketime preloaded), at
/// an offset the scenario changes at run time ([`Run::set_clock_offset`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FakeClock {
    pub worker: usize,
    /// Also `CLOCK_MONOTONIC` (what `Instant`, tokio's timers and the
    /// lease's validity read); otherwise the wall clock only.
    pub monotonic: bool,
}

/// What a fault script can reach while the workers run.
pub(crate) struct Run {
    pub servers: Servers,
    pub data: RedisServer,
    /// Single: one proxy in front of the server; Redlock: one per master.
    pub proxies: Vec<FaultProxy>,
    pub keys: DataKeys,
    pub children: Vec<Child>,
    pub plan: Plan,
    dir: PathBuf,
    ns: String,
    deadline_ns: u64,
    freeze_after_ns: Option<u64>,
    clock_file: PathBuf,
}

impl Run {
    /// The lock server of a [`Topology::Single`] plan.
    pub fn lock(&self) -> &RedisServer {
        match &self.servers {
            Servers::Single(server) => server,
            _ => panic!("{}: not a single-server plan", self.plan.name),
        }
    }

    pub fn lock_mut(&mut self) -> &mut RedisServer {
        match &mut self.servers {
            Servers::Single(server) => server,
            Servers::Redlock(masters) if masters.len() == 1 => &mut masters[0],
            _ => panic!("not a single-server plan"),
        }
    }

    pub fn data_get(&self, key: &str) -> Option<String> {
        match self.data.cmd(&["GET", key]) {
            Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            Value::Nil => None,
            other => panic!("GET {key}: {other:?}"),
        }
    }

    /// Waits until a section starts (as the workers announce at the start of
    /// each) in a worker for which `pred(id)`, with a body of at least
    /// `min_body`; panics after 20 s.
    pub fn wait_for_holder(&self, min_body: Duration, pred: impl Fn(usize) -> bool) {
        self.wait_for_holder_within(Duration::from_secs(20), min_body, pred);
    }

    /// [`Self::wait_for_holder`], waiting at most `bound`.
    pub fn wait_for_holder_within(
        &self,
        bound: Duration,
        min_body: Duration,
        pred: impl Fn(usize) -> bool,
    ) {
        let deadline = Instant::now() + bound;
        let before = self.data_get(&self.keys.holder).unwrap_or_default();
        loop {
            let holder = self.data_get(&self.keys.holder).unwrap_or_default();
            let mut parts = holder.split_whitespace().map(|p| p.parse::<u64>().ok());
            if holder != before
                && let (Some(Some(id)), Some(Some(body_ms))) = (parts.next(), parts.next())
                && pred(id as usize)
                && body_ms >= min_body.as_millis() as u64
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: no wanted holder within {bound:?}",
                self.plan.name
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn proxy(&self) -> &FaultProxy {
        self.proxies.first().expect("this plan has no proxy")
    }

    pub fn is_proxied(&self, id: usize) -> bool {
        id < self.plan.via_proxy
    }

    /// The redis key of the lock itself (on the lock servers): see
    /// [`lock_key_of`].
    pub fn lock_key(&self) -> String {
        lock_key_of(&self.plan.kind, &self.ns)
    }

    /// How worker `id` reaches the lock.
    fn target(&self, id: usize) -> LockTarget {
        let proxied = id < self.plan.via_proxy && !self.proxies.is_empty();
        match &self.servers {
            Servers::Single(_) if proxied => LockTarget::Single(self.proxies[0].url()),
            Servers::Single(server) => LockTarget::Single(server.url()),
            Servers::Sentinel(set) => LockTarget::Sentinel {
                master: MASTER_NAME.to_owned(),
                urls: set.sentinel_urls(),
            },
            Servers::Cluster(cluster) => LockTarget::Cluster(cluster.urls()),
            Servers::Redlock(_) if proxied => {
                LockTarget::Redlock(self.proxies.iter().map(FaultProxy::url).collect())
            }
            Servers::Redlock(masters) => {
                LockTarget::Redlock(masters.iter().map(RedisServer::url).collect())
            }
        }
    }

    /// Starts worker process `id` (ids past `plan.workers` are late
    /// joiners, started by a fault script), with `restart_grace` as given.
    pub fn spawn_worker(&mut self, id: usize, restart_grace: Option<Duration>) {
        let plan = &self.plan;
        let cfg = WorkerConfig {
            id,
            target: self.target(id),
            replica_sync: plan.replica_sync.map(|(n, t)| (n, t.as_millis() as u64)),
            data_url: self.data.url(),
            ns: self.ns.clone(),
            tasks: plan.tasks,
            ttl_ms: plan.ttl.as_millis() as u64,
            bodies_ms: plan.bodies.iter().map(|b| b.as_millis() as u64).collect(),
            wait_ms: (plan.ttl * 10).as_millis() as u64,
            restart_grace_ms: restart_grace.map(|g| g.as_millis() as u64),
            deadline_ns: self.deadline_ns,
            log_path: self.dir.join(format!("worker-{id}.log")),
            freeze_after_ns: if id == 0 { self.freeze_after_ns } else { None },
            kind: plan.kind.clone(),
        };
        let out = std::fs::File::create(self.dir.join(format!("worker-{id}.out"))).expect("out");
        let err = out.try_clone().expect("out");
        let mut cmd = Command::new(std::env::current_exe().expect("current exe"));
        cmd.args([
            "--exact",
            WORKER_TEST,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER_ENV, serde_json::to_string(&cfg).expect("config"))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
        if let Some(fake) = plan.fake_clock
            && fake.worker == id
        {
            cmd.env("LD_PRELOAD", LIBFAKETIME)
                .env("FAKETIME_TIMESTAMP_FILE", &self.clock_file)
                .env("FAKETIME_NO_CACHE", "1");
            if !fake.monotonic {
                cmd.env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
            }
        }
        self.children.push(cmd.spawn().expect("spawn worker"));
    }

    /// The fake clock's offset from the real one, in libfaketime's relative
    /// form (`"+30s"`, `"-10s"`, `"+0"`); takes effect at the worker's next
    /// clock read.
    pub fn set_clock_offset(&self, offset: &str) {
        std::fs::write(&self.clock_file, format!("{offset}\n")).expect("write the clock file");
    }
}

/// libfaketime, as Debian's `faketime` package installs it (the
/// multi-threaded variant: the workers run tokio's threads).
pub(crate) const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

pub(crate) fn sleep(d: Duration) {
    std::thread::sleep(d);
}

/// The redis key of the lock the workers of `kind` take on namespace `ns`:
/// the lock's, the semaphore's or the rw lock's (one name, `ns`), or for
/// `lock_all` that of the first key its first set names (each key of
/// `lock_all` is a lock of its own, in a slot of its own on Cluster).
pub(crate) fn lock_key_of(kind: &WorkKind, ns: &str) -> String {
    match kind {
        WorkKind::All(sets) => match sets.first().and_then(|set| set.first()) {
            Some(key) => format!("leasehold:{{{ns}:{key}}}:lock"),
            None => format!("leasehold:{{{ns}}}:lock"),
        },
        _ => format!("leasehold:{{{ns}}}:lock"),
    }
}

/// Keys on the lock servers without an expiry (`PTTL` -1), read once the
/// workers stopped: every key the library writes must lapse on its own,
/// whatever a fault cut short. Every running node that holds data: the
/// single server, the Sentinel set's primary, every Cluster node, every
/// Redlock master.
fn persistent_keys(servers: &Servers) -> Vec<String> {
    let nodes: Vec<&RedisServer> = match servers {
        Servers::Single(server) => vec![server],
        Servers::Sentinel(set) => vec![set.node(set.primary_port())],
        Servers::Cluster(cluster) => cluster.nodes().iter().collect(),
        Servers::Redlock(masters) => masters.iter().collect(),
    };
    let mut persistent = Vec::new();
    for node in nodes.into_iter().filter(|n| n.is_running()) {
        for key in node.keys("*") {
            // A Cluster replica answers `MOVED`: its master is read too.
            if matches!(node.cmd_result(&["PTTL", &key]), Ok(Value::Int(-1))) {
                persistent.push(format!("{key}@{}", node.port()));
            }
        }
    }
    persistent
}

/// Starts the lock servers of `topology` for lock namespace `ns`, and the
/// proxies of the first `via_proxy` workers.
pub(crate) fn start_servers(plan: &Plan, ns: &str) -> (Servers, Vec<FaultProxy>) {
    match plan.topology {
        Topology::Single => {
            let lock = RedisServer::start_with(&plan.lock_server_args);
            let proxies = if plan.via_proxy > 0 {
                vec![FaultProxy::start(lock.port())]
            } else {
                Vec::new()
            };
            (Servers::Single(lock), proxies)
        }
        Topology::Sentinel { held } => {
            let set = if held {
                SentinelSet::start()
            } else {
                SentinelSet::start_direct()
            };
            (Servers::Sentinel(set), Vec::new())
        }
        Topology::Cluster { replica } => {
            let mut cluster = RedisCluster::start(3);
            if replica {
                let slot = RedisCluster::key_slot(&lock_key_of(&plan.kind, ns));
                let master = cluster.node_for_slot(slot);
                cluster.add_replica(master);
            }
            (Servers::Cluster(cluster), Vec::new())
        }
        Topology::Redlock { masters } => {
            let masters: Vec<RedisServer> = (0..masters)
                .map(|_| RedisServer::start_with(&plan.lock_server_args))
                .collect();
            let proxies = if plan.via_proxy > 0 {
                masters
                    .iter()
                    .map(|m| FaultProxy::start(m.port()))
                    .collect()
            } else {
                Vec::new()
            };
            (Servers::Redlock(masters), proxies)
        }
    }
}

/// Runs `plan`: `warmup`, then `fault`, then `cooldown`, then stops the
/// workers and checks. Prints and returns the figures.
pub(crate) fn run(
    plan: Plan,
    warmup: Duration,
    cooldown: Duration,
    fault: impl FnOnce(&mut Run),
) -> Figures {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let ns = format!("faults:{}", plan.name);
    let (servers, proxies) = start_servers(&plan, &ns);
    let data = RedisServer::start();
    let dir = std::env::temp_dir().join(format!(
        "leasehold-faults-{}-{}-{}",
        plan.name,
        std::process::id(),
        now_ns()
    ));
    std::fs::create_dir_all(&dir).expect("log dir");
    let clock_file = dir.join("faketime");
    let mut run = Run {
        servers,
        data,
        proxies,
        keys: DataKeys::new(&ns),
        children: Vec::new(),
        deadline_ns: after(Duration::from_secs(600)),
        freeze_after_ns: plan.freeze_after.map(after),
        plan,
        dir,
        ns,
        clock_file,
    };
    run.set_clock_offset("+0");
    for id in 0..run.plan.workers {
        run.spawn_worker(id, run.plan.restart_grace);
    }

    sleep(warmup);
    fault(&mut run);
    sleep(cooldown);
    for proxy in &run.proxies {
        proxy.set_mode(ProxyMode::Pass);
    }
    let dir = run.dir.clone();
    run.data.cmd(&["SET", &run.keys.stop, "1"]);

    let stop_by = Instant::now() + STOP_TIMEOUT;
    for (id, child) in run.children.iter_mut().enumerate() {
        loop {
            match child.try_wait().expect("wait worker") {
                Some(status) => {
                    assert!(
                        status.success(),
                        "{}: worker {id} failed ({status}); output:\n{}",
                        run.plan.name,
                        std::fs::read_to_string(dir.join(format!("worker-{id}.out")))
                            .unwrap_or_default()
                    );
                    break;
                }
                None if Instant::now() > stop_by => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("{}: worker {id} did not stop", run.plan.name);
                }
                None => sleep(Duration::from_millis(20)),
            }
        }
    }

    let (sections, errors) = read_logs(&dir);
    let fence_log: Vec<String> = match run.data.cmd(&["LRANGE", &run.keys.fence_log, "0", "-1"]) {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                other => panic!("fence log item {other:?}"),
            })
            .collect(),
        other => panic!("LRANGE fence log: {other:?}"),
    };
    let mut lanes = vec!["-".to_owned()];
    if let WorkKind::All(sets) = &run.plan.kind {
        lanes.extend(sets.iter().flatten().cloned());
        lanes.sort();
        lanes.dedup();
    }
    let counters: HashMap<String, u64> = lanes
        .into_iter()
        .map(|lane| {
            let value = run
                .data_get(&run.keys.counter_of(&lane))
                .map_or(0, |s| s.parse().expect("counter"));
            (lane, value)
        })
        .collect();
    let mut figures = Figures::compute(&sections, &fence_log, &counters);
    for line in &errors {
        figures.add_errors(line);
    }
    let persistent = persistent_keys(&run.servers);
    figures.persistent_keys = persistent.len();
    if !persistent.is_empty() {
        println!(
            "faults {:<22} keys without expiry: {}",
            run.plan.name,
            persistent.join(" ")
        );
    }
    println!(
        "faults {:<22} workers={}x{} {figures}",
        run.plan.name,
        run.children.len(),
        run.plan.tasks
    );
    if !figures.error_sample.is_empty() {
        println!(
            "faults {:<22} first errors: {}",
            run.plan.name, figures.error_sample
        );
    }
    if !figures.overlap_sample.is_empty() {
        println!(
            "faults {:<22} first overlap: {}",
            run.plan.name, figures.overlap_sample
        );
    }
    if std::env::var_os("LEASEHOLD_FAULTS_KEEP").is_some() {
        println!(
            "faults {:<22} logs kept in {}",
            run.plan.name,
            dir.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    figures
}

/// What every scenario requires, the frozen one aside.
pub(crate) fn assert_safe(name: &str, f: &Figures) {
    assert!(f.sections > 0, "{name}: no section ran: {f}");
    assert_eq!(
        f.stale_accepted, 0,
        "{name}: stale fenced writes accepted: {f}"
    );
    assert_eq!(
        f.overlapping_writes, 0,
        "{name}: writes while another held: {f}"
    );
    assert_eq!(f.lost_updates, 0, "{name}: lost updates: {f}");
    assert_eq!(
        f.fresh_rejected, 0,
        "{name}: current holders' fenced writes rejected: {f}"
    );
    assert_eq!(
        f.token_regressions, 0,
        "{name}: fencing tokens did not increase: {f}"
    );
}

/// What a family scenario requires besides [`assert_safe`]: its sections'
/// intervals (from the grant to the end of the body or, when the lease was
/// lost, to the deadline its guard knew) never hold together where they
/// may not.
pub(crate) fn assert_family_safe(name: &str, f: &Figures) {
    assert_safe(name, f);
    assert_eq!(f.overlaps, 0, "{name}: two holders at once: {f}");
    assert_eq!(f.over_permits, 0, "{name}: more holders than permits: {f}");
    assert_unique_tokens_and_expiring_keys(name, f);
}

/// What the family keeps even where a topology loses data: no fencing
/// token issued twice, no key left without an expiry.
pub(crate) fn assert_unique_tokens_and_expiring_keys(name: &str, f: &Figures) {
    assert_eq!(
        f.token_duplicates, 0,
        "{name}: a fencing token issued twice: {f}"
    );
    assert_eq!(
        f.persistent_keys, 0,
        "{name}: keys left on the lock servers without an expiry: {f}"
    );
}

#[test]
fn baseline() {
    let f = run(
        Plan::new("baseline"),
        Duration::from_secs(scaled(4, 5).into()),
        Duration::ZERO,
        |_| {},
    );
    assert_safe("baseline", &f);
    assert_eq!(
        f.dropped, 0,
        "baseline: bodies dropped without a fault: {f}"
    );
}

/// Half the workers behind the proxy; one of them holds when it partitions
/// them away for 3 TTLs.
#[test]
fn proxy_blackhole() {
    let mut plan = Plan::new("proxy_blackhole");
    plan.via_proxy = plan.workers / 2;
    let f = run(
        plan,
        Duration::from_secs(1),
        Duration::from_secs(2),
        |run| {
            for _ in 0..scaled(1, 3) {
                run.wait_for_holder(LONG, |id| run.is_proxied(id));
                sleep(Duration::from_millis(100));
                run.proxy().set_mode(ProxyMode::Blackhole);
                sleep(TTL * 3);
                run.proxy().set_mode(ProxyMode::Pass);
                sleep(TTL);
            }
        },
    );
    assert_safe("proxy_blackhole", &f);
    assert!(
        f.dropped >= 1,
        "proxy_blackhole: the fault never cost a holder its lease: {f}"
    );
}

/// Half the workers behind the proxy; one of them holds when every proxied
/// connection is reset, and new ones refused, for 2 TTLs.
#[test]
fn proxy_reset() {
    let mut plan = Plan::new("proxy_reset");
    plan.via_proxy = plan.workers / 2;
    let f = run(
        plan,
        Duration::from_secs(1),
        Duration::from_secs(2),
        |run| {
            for _ in 0..scaled(1, 3) {
                run.wait_for_holder(LONG, |id| run.is_proxied(id));
                sleep(Duration::from_millis(100));
                run.proxy().set_mode(ProxyMode::Reset);
                sleep(TTL * 2);
                run.proxy().set_mode(ProxyMode::Pass);
                sleep(TTL);
            }
        },
    );
    assert_safe("proxy_reset", &f);
    assert!(
        f.dropped >= 1,
        "proxy_reset: the fault never cost a holder its lease: {f}"
    );
}

/// Half the workers behind the proxy, which holds every chunk 150 ms (a
/// 300 ms round trip against a 1 s lease) for 3 s.
#[test]
fn proxy_latency() {
    let mut plan = Plan::new("proxy_latency");
    plan.via_proxy = plan.workers / 2;
    let f = run(
        plan,
        Duration::from_secs(1),
        Duration::from_secs(1),
        |run| {
            run.proxy()
                .set_mode(ProxyMode::Latency(Duration::from_millis(150)));
            sleep(Duration::from_secs(scaled(3, 4).into()));
            run.proxy().set_mode(ProxyMode::Pass);
        },
    );
    assert_safe("proxy_latency", &f);
}

/// Worker 0 takes the lock, reads the counter, and is SIGSTOPped for 8 s
/// (8 TTLs) before it writes. Others take the lock meanwhile; when it resumes, its
/// counter write loses updates (no lock prevents that) and its fenced write
/// is rejected (the fencing token does).
#[test]
fn holder_sigstopped() {
    let mut plan = Plan::new("holder_sigstopped");
    plan.bodies = vec![SHORT];
    plan.freeze_after = Some(Duration::from_secs(1));
    let f = run(plan, Duration::ZERO, Duration::from_secs(1), |run| {
        let deadline = Instant::now() + Duration::from_secs(20);
        let pid: u32 = loop {
            if let Some(pid) = run.data_get(&run.keys.frozen) {
                break pid.parse().expect("pid");
            }
            assert!(Instant::now() < deadline, "the frozen section never came");
            sleep(Duration::from_millis(2));
        };
        assert_eq!(pid, run.children[0].id(), "frozen pid");
        freeze_process(pid);
        // Liveness behind a frozen process: its lease runs out after the
        // TTL, and the places of its waiters (they may be first in line)
        // lapse at most their sleep hint (<= TTL) plus PLACE_GRACE (2 s)
        // after their last attempt. So another process holds the lock
        // within about 2 TTL + 2 s of the freeze (measured: 2.8-4.8 s);
        // 7 s leaves room for a loaded machine, and stays below the
        // workers' 10 s wait, past which every waiter would start over.
        let frozen_at = Instant::now();
        let tagged = format!("leasehold:{{faults:{}}}", run.plan.name);
        let lock_key = format!("{tagged}:lock");
        let mut other_holder_after = None;
        // What the lock and its line looked like, every 500 ms until another
        // holder showed: printed if none did.
        let mut seen = Vec::new();
        while frozen_at.elapsed() < FREEZE.max(FREEZE_WINDOW) {
            let holder = run.lock().cmd(&["GET", &lock_key]);
            if other_holder_after.is_none()
                && let Value::BulkString(holder) = &holder
                && !holder.ends_with(b":worker-0")
            {
                other_holder_after = Some(frozen_at.elapsed());
            }
            if other_holder_after.is_none()
                && seen.len() * 500 <= frozen_at.elapsed().as_millis() as usize
            {
                seen.push(format!(
                    "{:?}: holder {holder:?} pttl {:?} line {:?} places {:?}",
                    frozen_at.elapsed(),
                    run.lock().cmd(&["PTTL", &lock_key]),
                    run.lock()
                        .cmd(&["LRANGE", &format!("{tagged}:line"), "0", "-1"]),
                    run.lock().cmd(&["HGETALL", &format!("{tagged}:places")]),
                ));
            }
            sleep(Duration::from_millis(20));
        }
        thaw_process(pid);
        eprintln!(
            "faults holder_sigstopped: another process held the lock {other_holder_after:?} after the freeze"
        );
        let after = other_holder_after.unwrap_or_else(|| {
            panic!(
                "nobody else took the lock while the holder was frozen; server time {:?}, seen:\n{}",
                run.lock().cmd(&["TIME"]),
                seen.join("\n")
            )
        });
        assert!(
            after < Duration::from_secs(7),
            "the line stalled behind the frozen process: {after:?}"
        );
    });
    let name = "holder_sigstopped";
    assert_eq!(
        f.frozen_fenced,
        Some(false),
        "{name}: the frozen holder's fenced write must be rejected: {f}"
    );
    assert_eq!(
        f.stale_accepted, 0,
        "{name}: stale fenced writes accepted: {f}"
    );
    assert!(f.stale_rejected >= 1, "{name}: {f}");
    assert_eq!(
        f.overlapping_writes, 0,
        "{name}: writes while another held, besides the frozen holder's: {f}"
    );
    assert_eq!(f.fresh_rejected, 0, "{name}: {f}");
    assert_eq!(f.token_regressions, 0, "{name}: {f}");
    // Reported, not asserted: the frozen holder's counter write loses the
    // updates made while it was frozen.
}

/// Restarts of the lock server (without persistence, every lock and fence
/// counter is forgotten), the workers using `restart_grace(ttl)`, as README
/// recommends. Two kinds of restart, each where it hurts most:
///
/// * `Burst`: two restarts in one wall-clock second, the workers taking
///   locks in between: a fence counter restarted in the second in which the
///   previous one started must not repeat its tokens.
/// * `LateInLongBody`: while a long (renewed) body holds, shortly before it
///   writes: its lease is gone with the data, and it must not write once
///   another holder started.
#[derive(Clone, Copy, PartialEq)]
enum RestartKind {
    Burst,
    LateInLongBody,
}

fn restarts(
    name: &'static str,
    bodies: Vec<Duration>,
    args: Vec<&'static str>,
    kinds: &[RestartKind],
) -> Figures {
    restarts_of(Plan::new(name), bodies, args, kinds)
}

/// [`restarts`] of the one lock server of `plan` (a single server, or a
/// Redlock of one master).
fn restarts_of(
    mut plan: Plan,
    bodies: Vec<Duration>,
    args: Vec<&'static str>,
    kinds: &[RestartKind],
) -> Figures {
    plan.bodies = bodies;
    plan.restart_grace = Some(TTL);
    plan.lock_server_args = args;
    let kinds = kinds.to_vec();
    run(
        plan,
        Duration::from_secs(2),
        Duration::from_secs(2),
        move |run| {
            for i in 0..scaled(3, 2) as usize {
                match kinds[i % kinds.len()] {
                    RestartKind::Burst => {
                        sleep_to_next_wall_second(Duration::from_millis(20));
                        run.lock_mut().restart();
                        sleep(Duration::from_millis(400));
                        run.lock_mut().restart();
                    }
                    RestartKind::LateInLongBody => {
                        run.wait_for_holder(LONG, |_| true);
                        // 50..150 ms before the body writes: likely before
                        // its next renewal (every ttl/3) finds the key gone.
                        let before_write = Duration::from_millis(50 + 50 * (i as u64 % 3));
                        sleep(LONG - before_write);
                        run.lock_mut().restart();
                    }
                }
                sleep(TTL * 2);
            }
        },
    )
}

/// Sleeps until `offset` past the next whole second of the wall clock (the
/// clock Redis' `TIME` reads).
fn sleep_to_next_wall_second(offset: Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("wall clock");
    let into_second = Duration::from_nanos(u64::from(now.subsec_nanos()));
    sleep(Duration::from_secs(1) - into_second + offset);
}

#[test]
fn restart_short_bodies() {
    let f = restarts(
        "restart_short_bodies",
        vec![SHORT],
        vec![],
        &[RestartKind::Burst],
    );
    assert_safe("restart_short_bodies", &f);
}

#[test]
fn restart_long_bodies() {
    let f = restarts(
        "restart_long_bodies",
        vec![LONG],
        vec![],
        &[RestartKind::LateInLongBody],
    );
    assert_safe("restart_long_bodies", &f);
}

/// A Redlock of one master takes free locks the way a single server does
/// (the fast path; its tokens are the master's clock, written down only
/// for leases held a moment). The same restarts as above, both kinds, on
/// that master: no two holders, no stale fenced write accepted, tokens
/// never going back although the restarted master forgot every counter.
#[test]
fn redlock_one_master_restart() {
    let name = "redlock_one_master_restart";
    let mut plan = Plan::new(name);
    plan.topology = Topology::Redlock { masters: 1 };
    let f = restarts_of(
        plan,
        mixed(),
        vec![],
        &[RestartKind::Burst, RestartKind::LateInLongBody],
    );
    assert_safe(name, &f);
}

/// With `appendfsync always` the locks and counters survive the restart.
#[test]
fn restart_with_aof() {
    let f = restarts(
        "restart_with_aof",
        mixed(),
        vec!["--appendonly", "yes", "--appendfsync", "always"],
        &[RestartKind::Burst, RestartKind::LateInLongBody],
    );
    assert_safe("restart_with_aof", &f);
}

/// The lock server stops answering everyone for 2.5 TTLs (`DEBUG SLEEP`)
/// while a long body holds.
#[test]
fn debug_sleep() {
    let mut plan = Plan::new("debug_sleep");
    plan.lock_server_args = vec!["--enable-debug-command", "yes"];
    let f = run(
        plan,
        Duration::from_secs(1),
        Duration::from_secs(2),
        |run| {
            for _ in 0..scaled(1, 3) {
                run.wait_for_holder(LONG, |_| true);
                sleep(Duration::from_millis(200));
                run.lock()
                    .debug_sleep(TTL * 5 / 2)
                    .join()
                    .expect("DEBUG SLEEP");
                sleep(TTL);
            }
        },
    );
    assert_safe("debug_sleep", &f);
    assert!(
        f.dropped >= 1,
        "debug_sleep: the fault never cost a holder its lease: {f}"
    );
}

/// A server that may evict keys is refused at connect, with an error naming
/// its policy; `allow_eviction(true)` accepts it.
#[test]
fn evicting_server_refused() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(evicting_server_refused_async());
}

async fn evicting_server_refused_async() {
    let mut line = Vec::new();
    let mut failures = Vec::new();
    for policy in ["allkeys-lru", "volatile-lru"] {
        let server = RedisServer::start_with(&["--maxmemory", "2mb", "--maxmemory-policy", policy]);
        let refused = leasehold::LockClient::builder()
            .connect(&server.url())
            .await
            .err()
            .map(|e| e.to_string());
        match &refused {
            Some(msg) if msg.contains(policy) => line.push(format!("{policy}=refused")),
            Some(msg) => {
                line.push(format!("{policy}=refused-without-naming-it"));
                failures.push(format!("{policy}: error does not name the policy: {msg}"));
            }
            None => {
                line.push(format!("{policy}=accepted"));
                failures.push(format!("{policy}: connect succeeded"));
            }
        }
        let allowed = leasehold::LockClient::builder()
            .allow_eviction(true)
            .connect(&server.url())
            .await;
        line.push(format!(
            "{policy}+allow_eviction={}",
            if allowed.is_ok() {
                "accepted"
            } else {
                "refused"
            }
        ));
        if let Err(e) = allowed {
            failures.push(format!("{policy}: allow_eviction(true) refused: {e}"));
        }
    }
    println!("faults {:<22} {}", "evicting_server", line.join(" "));
    assert!(failures.is_empty(), "{}", failures.join("; "));
}
