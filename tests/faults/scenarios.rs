//! The scenarios: one `#[test]` each, run one at a time (they share two
//! cores with everything else). Each starts a lock server and a data server,
//! optionally a fault proxy in front of the lock server, spawns the worker
//! processes, breaks something while they run, stops them, checks.

use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::Value;

use crate::checker::{Figures, read_logs};
use crate::clock::{after, now_ns};
use crate::support::{FaultProxy, ProxyMode, RedisServer, freeze_process, thaw_process};
use crate::workload::{DataKeys, FREEZE_WINDOW, WORKER_ENV, WORKER_TEST, WorkerConfig};

/// One scenario at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The lease length of every scenario.
const TTL: Duration = Duration::from_secs(1);
/// How long the SIGSTOP scenario keeps its holder frozen.
const FREEZE: Duration = Duration::from_secs(8);
/// A short body.
const SHORT: Duration = Duration::from_millis(10);
/// A body longer than the lease: it needs renewals to finish.
const LONG: Duration = Duration::from_millis(1500);

/// Mostly short bodies, one long one in 16 (the line of waiters is fair:
/// long bodies set the pace of a round).
fn mixed() -> Vec<Duration> {
    let mut bodies = vec![SHORT; 15];
    bodies.push(LONG);
    bodies
}
/// How long workers may take to stop once told to.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// `LEASEHOLD_FAULTS_LONG=1`: more of everything.
fn long_run() -> bool {
    std::env::var("LEASEHOLD_FAULTS_LONG").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `n` in the bounded run, `n * k` in the long run.
fn scaled(n: u32, k: u32) -> u32 {
    if long_run() { n * k } else { n }
}

#[derive(Clone)]
struct Plan {
    name: &'static str,
    workers: usize,
    tasks: usize,
    bodies: Vec<Duration>,
    /// How many of the workers reach the lock server through the proxy.
    via_proxy: usize,
    restart_grace: Option<Duration>,
    lock_server_args: Vec<&'static str>,
    /// Worker 0 runs one frozen section after this long.
    freeze_after: Option<Duration>,
}

impl Plan {
    fn new(name: &'static str) -> Plan {
        Plan {
            name,
            workers: scaled(4, 2) as usize,
            tasks: scaled(6, 2) as usize,
            bodies: mixed(),
            via_proxy: 0,
            restart_grace: None,
            lock_server_args: Vec::new(),
            freeze_after: None,
        }
    }
}

/// What a fault script can reach while the workers run.
struct Run {
    lock: RedisServer,
    data: RedisServer,
    proxy: Option<FaultProxy>,
    keys: DataKeys,
    children: Vec<Child>,
    plan: Plan,
}

impl Run {
    fn data_get(&self, key: &str) -> Option<String> {
        match self.data.cmd(&["GET", key]) {
            Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            Value::Nil => None,
            other => panic!("GET {key}: {other:?}"),
        }
    }

    /// Waits until a section starts (as the workers announce at the start of
    /// each) in a worker for which `pred(id)`, with a body of at least
    /// `min_body`; panics after 20 s.
    fn wait_for_holder(&self, min_body: Duration, pred: impl Fn(usize) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
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
                "{}: no wanted holder within 20 s",
                self.plan.name
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn proxy(&self) -> &FaultProxy {
        self.proxy.as_ref().expect("this plan has no proxy")
    }

    fn is_proxied(&self, id: usize) -> bool {
        id < self.plan.via_proxy
    }
}

fn sleep(d: Duration) {
    std::thread::sleep(d);
}

/// Runs `plan`: `warmup`, then `fault`, then `cooldown`, then stops the
/// workers and checks. Prints and returns the figures.
fn run(plan: Plan, warmup: Duration, cooldown: Duration, fault: impl FnOnce(&mut Run)) -> Figures {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let lock = RedisServer::start_with(&plan.lock_server_args);
    let data = RedisServer::start();
    let proxy = (plan.via_proxy > 0).then(|| FaultProxy::start(lock.port()));
    let dir = std::env::temp_dir().join(format!(
        "leasehold-faults-{}-{}-{}",
        plan.name,
        std::process::id(),
        now_ns()
    ));
    std::fs::create_dir_all(&dir).expect("log dir");
    let ns = format!("faults:{}", plan.name);
    let exe = std::env::current_exe().expect("current exe");
    let deadline_ns = after(Duration::from_secs(600));
    let freeze_after_ns = plan.freeze_after.map(after);
    let children = (0..plan.workers)
        .map(|id| {
            let lock_url = match &proxy {
                Some(p) if id < plan.via_proxy => p.url(),
                _ => lock.url(),
            };
            let cfg = WorkerConfig {
                id,
                lock_url,
                data_url: data.url(),
                ns: ns.clone(),
                tasks: plan.tasks,
                ttl_ms: TTL.as_millis() as u64,
                bodies_ms: plan.bodies.iter().map(|b| b.as_millis() as u64).collect(),
                wait_ms: (TTL * 10).as_millis() as u64,
                restart_grace_ms: plan.restart_grace.map(|g| g.as_millis() as u64),
                deadline_ns,
                log_path: dir.join(format!("worker-{id}.log")),
                freeze_after_ns: if id == 0 { freeze_after_ns } else { None },
            };
            let out = std::fs::File::create(dir.join(format!("worker-{id}.out"))).expect("out");
            let err = out.try_clone().expect("out");
            Command::new(&exe)
                .args([
                    "--exact",
                    WORKER_TEST,
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(WORKER_ENV, serde_json::to_string(&cfg).expect("config"))
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let mut run = Run {
        lock,
        data,
        proxy,
        keys: DataKeys::new(&ns),
        children,
        plan,
    };

    sleep(warmup);
    fault(&mut run);
    sleep(cooldown);
    if let Some(proxy) = &run.proxy {
        proxy.set_mode(ProxyMode::Pass);
    }
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
    let counter = run
        .data_get(&run.keys.counter)
        .map_or(0, |s| s.parse().expect("counter"));
    let mut figures = Figures::compute(&sections, &fence_log, counter);
    for line in &errors {
        figures.add_errors(line);
    }
    println!(
        "faults {:<22} workers={}x{} {figures}",
        run.plan.name, run.plan.workers, run.plan.tasks
    );
    if !figures.error_sample.is_empty() {
        println!(
            "faults {:<22} first error: {}",
            run.plan.name, figures.error_sample
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
fn assert_safe(name: &str, f: &Figures) {
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
            let holder = run.lock.cmd(&["GET", &lock_key]);
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
                    run.lock.cmd(&["PTTL", &lock_key]),
                    run.lock
                        .cmd(&["LRANGE", &format!("{tagged}:line"), "0", "-1"]),
                    run.lock.cmd(&["HGETALL", &format!("{tagged}:places")]),
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
                run.lock.cmd(&["TIME"]),
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
    let mut plan = Plan::new(name);
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
                        run.lock.restart();
                        sleep(Duration::from_millis(400));
                        run.lock.restart();
                    }
                    RestartKind::LateInLongBody => {
                        run.wait_for_holder(LONG, |_| true);
                        // 50..150 ms before the body writes: likely before
                        // its next renewal (every ttl/3) finds the key gone.
                        let before_write = Duration::from_millis(50 + 50 * (i as u64 % 3));
                        sleep(LONG - before_write);
                        run.lock.restart();
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
                run.lock
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
