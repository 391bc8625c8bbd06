//! The worker processes: this test binary re-run with [`WORKER_ENV`] set to
//! a JSON [`WorkerConfig`]. Each runs `tasks` tokio tasks that take the one
//! lock key again and again through the public API and, in each critical
//! section, on the data server (never faulted, reached directly):
//!
//! 1. `GET` the counter, hold for the body's time, `SET` it to the value + 1
//!    (a non-atomic read-modify-write: two holders at once lose an update);
//! 2. a fenced write: a script that accepts the section's fencing token only
//!    if it is at least the highest one it accepted, and appends
//!    `section token accepted` to a list, in the order the store applied them.
//!
//! What a section takes and writes depends on the worker's [`WorkKind`]:
//! the lock and a writer of the rw lock do both steps on the one counter
//! and fence; a `lock_all` section does them on each of its keys' own
//! counter and fence ("lanes"); a reader only reads the counter; a
//! semaphore permit writes no counter (up to N hold at once) and its fenced
//! write checks that its grant's token was never issued before (a
//! semaphore's fence key is shared by all its permits and issues one token
//! per grant: it orders grants, it cannot tell a stale permit from a
//! current one; the checker does that by counting holders).
//!
//! Every section is written as one line to the worker's log file, with times
//! from the shared monotonic clock. Workers stop when the parent sets the
//! stop key (or at the hard deadline).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{LockClient, LockError};
use serde::{Deserialize, Serialize};

use crate::clock::now_ns;

/// The environment variable that makes this binary a worker.
pub const WORKER_ENV: &str = "LEASEHOLD_FAULTS_WORKER";

/// The name of the worker test, for `--exact`.
pub const WORKER_TEST: &str = "workload::faults_worker";

/// What one worker process does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerConfig {
    pub id: usize,
    /// Where the lock lives (a server, or fault proxies in front of it).
    pub target: LockTarget,
    /// `LockClientBuilder::replica_sync(n, timeout)`, when set: `(n, timeout ms)`.
    pub replica_sync: Option<(usize, u64)>,
    /// The data server (counter, fenced store), reached directly.
    pub data_url: String,
    /// Namespace of the data keys and the lock key.
    pub ns: String,
    pub tasks: usize,
    pub ttl_ms: u64,
    /// Body lengths: section `seq` of task `t` uses `bodies_ms[(t + seq) % len]`.
    pub bodies_ms: Vec<u64>,
    pub wait_ms: u64,
    /// `LockClientBuilder::restart_grace`, when set.
    pub restart_grace_ms: Option<u64>,
    /// Hard deadline (shared clock) if the stop key never comes.
    pub deadline_ns: u64,
    pub log_path: PathBuf,
    /// This worker's task 0 does one "frozen" section (see
    /// [`frozen_section`]) as soon as the shared clock passes this.
    pub freeze_after_ns: Option<u64>,
    /// Which primitive the sections take.
    #[serde(default)]
    pub kind: WorkKind,
}

/// Which member of the lock family a worker's sections take, on the
/// scenario's namespace `ns`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub enum WorkKind {
    /// `lock(ns)`.
    #[default]
    Lock,
    /// `semaphore(ns, permits)`.
    Semaphore(u32),
    /// `rw_lock(ns)`: section `seq` of task `t` writes when
    /// `(t + seq) % writer_every == 0`, else reads.
    ReadWrite { writer_every: usize },
    /// `lock_all` of one of these sets of keys (`<ns>:<name>`), named in
    /// the order given: section `seq` of task `t` of worker `id` takes set
    /// `(id + t + seq) % len`.
    All(Vec<Vec<String>>),
}

/// What one section takes, decided by the kind and the section's place.
#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    Lock,
    Permit(u32),
    Read,
    Write,
    /// The key names (without the namespace), as the worker names them.
    All(Vec<String>),
}

impl Role {
    /// The lanes (counter and fence) the section writes: `-` is the
    /// scenario's own counter and fence.
    pub fn lanes(&self) -> Vec<String> {
        match self {
            Role::Lock | Role::Write => vec!["-".to_owned()],
            Role::All(keys) => {
                let mut keys = keys.clone();
                keys.sort();
                keys.dedup();
                keys
            }
            Role::Read | Role::Permit(_) => Vec::new(),
        }
    }
}

/// How a worker reaches the lock: the topology and its URLs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum LockTarget {
    /// One server (`connect`).
    Single(String),
    /// Sentinels watching a set (`connect_sentinel`).
    Sentinel { master: String, urls: Vec<String> },
    /// Seed nodes of a Redis Cluster (`connect_cluster`).
    Cluster(Vec<String>),
    /// Independent masters (`connect_redlock`).
    Redlock(Vec<String>),
}

/// Data keys of a scenario, on the data server.
pub struct DataKeys {
    pub counter: String,
    pub fence_hi: String,
    pub fence_log: String,
    /// Set by the frozen section to its pid when it is ready to be frozen.
    pub frozen: String,
    /// Set to `<worker id> <body ms> <section id>` at the start of each section.
    pub holder: String,
    /// Set by the parent: workers stop starting sections.
    pub stop: String,
}

impl DataKeys {
    pub fn new(ns: &str) -> DataKeys {
        DataKeys {
            counter: format!("{ns}:counter"),
            fence_hi: format!("{ns}:fence:hi"),
            fence_log: format!("{ns}:fence:log"),
            frozen: format!("{ns}:frozen"),
            holder: format!("{ns}:holder"),
            stop: format!("{ns}:stop"),
        }
    }

    /// The counter of a lane (`-`: the scenario's own).
    pub fn counter_of(&self, lane: &str) -> String {
        if lane == "-" {
            self.counter.clone()
        } else {
            format!("{}:{lane}", self.counter)
        }
    }

    fn fence_of(&self, lane: &str) -> String {
        if lane == "-" {
            self.fence_hi.clone()
        } else {
            format!("{}:{lane}", self.fence_hi)
        }
    }
}

/// The fenced store. `max` (a lane of exclusive holders): accept a token at
/// least as high as the highest accepted so far. `unique` (semaphore
/// permits): accept a token never presented before. Every attempt is
/// recorded in apply order as `section token accepted lane`.
const FENCED_WRITE: &str = r"
local token = tonumber(ARGV[1])
local ok = 0
if ARGV[3] == 'unique' then
  ok = redis.call('SADD', KEYS[1], ARGV[1])
else
  local hi = tonumber(redis.call('GET', KEYS[1]) or '0')
  if token >= hi then
    redis.call('SET', KEYS[1], ARGV[1])
    ok = 1
  end
end
redis.call('RPUSH', KEYS[2], ARGV[2] .. ' ' .. ARGV[1] .. ' ' .. ok .. ' ' .. ARGV[4])
return ok
";

/// One critical section as it happened (0 = did not happen).
#[derive(Debug, Default, Clone)]
pub struct SectionRecord {
    pub proc: usize,
    pub task: usize,
    pub seq: u64,
    pub token: u64,
    /// The body started (the lock was acquired).
    pub start: u64,
    /// The counter's `SET` was answered.
    pub set_done: u64,
    /// The `SET` was sent; if `set_done` is 0 it may or may not have landed.
    pub set_sent: bool,
    /// The fenced write was answered.
    pub fence_done: u64,
    pub fenced: Option<bool>,
    /// The body finished, or was dropped (the lease was lost).
    pub end: u64,
    pub frozen: bool,
    pub outcome: String,
    /// A family section's validity deadline, as its guard last told it (0:
    /// not known; not logged): a body dropped at the loss of its lease
    /// ends at this deadline, not later when its process got to run.
    pub valid_until: u64,
    /// What the section took: `l` (lock), `s<permits>`, `r`, `w`, or
    /// `a:<key>=<token>,...` (lock_all: every key's own token).
    pub role: String,
}

impl SectionRecord {
    pub fn id(&self) -> String {
        format!("{}.{}.{}", self.proc, self.task, self.seq)
    }

    pub fn to_line(&self) -> String {
        format!(
            "S {} {} {} {} {} {} {} {} {} {} {} {} {}",
            self.proc,
            self.task,
            self.seq,
            self.token,
            self.start,
            self.set_done,
            u8::from(self.set_sent),
            self.fence_done,
            match self.fenced {
                Some(true) => "A",
                Some(false) => "R",
                None => "-",
            },
            self.end,
            u8::from(self.frozen),
            self.outcome,
            if self.role.is_empty() {
                "l"
            } else {
                &self.role
            },
        )
    }

    pub fn from_line(line: &str) -> Option<SectionRecord> {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 14 || f[0] != "S" {
            return None;
        }
        let n = |i: usize| f[i].parse::<u64>().ok();
        Some(SectionRecord {
            proc: n(1)? as usize,
            task: n(2)? as usize,
            seq: n(3)?,
            token: n(4)?,
            start: n(5)?,
            set_done: n(6)?,
            set_sent: f[7] == "1",
            fence_done: n(8)?,
            fenced: match f[9] {
                "A" => Some(true),
                "R" => Some(false),
                _ => None,
            },
            end: n(10)?,
            frozen: f[11] == "1",
            outcome: f[12].to_owned(),
            role: f[13].to_owned(),
            valid_until: 0,
        })
    }

    /// `(lane, token)` of each lane the section wrote or would have written
    /// (see [`Role::lanes`]); empty for readers and permits.
    pub fn lane_tokens(&self) -> Vec<(String, u64)> {
        match self.role.as_str() {
            "l" | "w" => vec![("-".to_owned(), self.token)],
            role => role
                .strip_prefix("a:")
                .map(|keys| {
                    keys.split(',')
                        .filter_map(|kt| {
                            let (k, t) = kt.split_once('=')?;
                            Some((k.to_owned(), t.parse().ok()?))
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// `(fence key, token)`: the lane tokens, and a reader's token on the
    /// rw lock's one fence key (`-`); a permit's on the semaphore's.
    pub fn order_tokens(&self) -> Vec<(String, u64)> {
        match self.role.as_str() {
            "r" => vec![("-".to_owned(), self.token)],
            r if r.starts_with('s') => vec![("-".to_owned(), self.token)],
            _ => self.lane_tokens(),
        }
    }

    /// The permits of a semaphore section.
    pub fn permits(&self) -> Option<u32> {
        self.role.strip_prefix('s').and_then(|n| n.parse().ok())
    }

    /// Whether two sections may not hold at once: two lock holders, a
    /// writer and anyone, two `lock_all` sharing a key. Permits never
    /// conflict pairwise (their bound is counted, see the checker).
    pub fn conflicts(&self, other: &SectionRecord) -> bool {
        match (self.role.as_str(), other.role.as_str()) {
            ("l", "l") | ("w", "w" | "r") | ("r", "w") => true,
            (a, b) if a.starts_with("a:") && b.starts_with("a:") => {
                let theirs = other.lane_tokens();
                self.lane_tokens()
                    .iter()
                    .any(|(k, _)| theirs.iter().any(|(o, _)| o == k))
            }
            _ => false,
        }
    }
}

/// Errors of attempts that got no section, per kind.
#[derive(Default)]
struct ErrorCounts {
    busy: AtomicU64,
    backend: AtomicU64,
    lost: AtomicU64,
    other: AtomicU64,
    sample: Mutex<Option<String>>,
}

impl ErrorCounts {
    fn count(&self, e: &LockError) -> &'static str {
        let (counter, kind) = match e {
            LockError::Busy { .. } => (&self.busy, "busy"),
            LockError::Lost { .. } => (&self.lost, "lost"),
            LockError::Backend { .. } => (&self.backend, "backend"),
            _ => (&self.other, "other"),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if !matches!(e, LockError::Busy { .. }) {
            // The first error of each kind.
            let mut sample = self.sample.lock().unwrap_or_else(|p| p.into_inner());
            let text = sample.get_or_insert_with(String::new);
            let tag = format!("[{kind}] ");
            if !text.contains(&tag) {
                if !text.is_empty() {
                    text.push_str(" | ");
                }
                text.push_str(&tag);
                text.push_str(&e.to_string().replace('\n', " "));
            }
        }
        kind
    }
}

struct Worker {
    cfg: WorkerConfig,
    keys: DataKeys,
    client: LockClient,
    data: redis::aio::MultiplexedConnection,
    fenced: redis::Script,
    stop: AtomicBool,
    errors: ErrorCounts,
    log: Mutex<Vec<String>>,
}

impl Worker {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || now_ns() >= self.cfg.deadline_ns
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.cfg.ttl_ms)
    }

    fn request(&self) -> leasehold::LockRequest {
        self.request_for(&Role::Lock)
    }

    /// The request of a section of `role`.
    fn request_for(&self, role: &Role) -> leasehold::LockRequest {
        let key = self.cfg.ns.clone();
        let request = match role {
            Role::Lock => self.client.lock(key),
            Role::Permit(n) => self.client.semaphore(key, *n),
            Role::Read => self.client.rw_lock(key).read(),
            Role::Write => self.client.rw_lock(key).write(),
            Role::All(keys) => self
                .client
                .lock_all(keys.iter().map(|k| format!("{}:{k}", self.cfg.ns))),
        };
        request
            .ttl(self.ttl())
            .renew(true)
            .wait(Duration::from_millis(self.cfg.wait_ms))
    }

    /// What section `seq` of `task` takes.
    fn role(&self, task: usize, seq: u64) -> Role {
        let at = task + seq as usize;
        match &self.cfg.kind {
            WorkKind::Lock => Role::Lock,
            WorkKind::Semaphore(n) => Role::Permit(*n),
            WorkKind::ReadWrite { writer_every } if at.is_multiple_of((*writer_every).max(1)) => {
                Role::Write
            }
            WorkKind::ReadWrite { .. } => Role::Read,
            WorkKind::All(sets) => Role::All(sets[(self.cfg.id + at) % sets.len()].clone()),
        }
    }

    async fn get_counter(&self) -> u64 {
        self.get_lane("-").await
    }

    async fn get_lane(&self, lane: &str) -> u64 {
        let mut data = self.data.clone();
        let v: Option<u64> = redis::cmd("GET")
            .arg(self.keys.counter_of(lane))
            .query_async(&mut data)
            .await
            .expect("data server: GET counter");
        v.unwrap_or(0)
    }

    async fn set_counter(&self, record: &Mutex<SectionRecord>, value: u64) {
        self.set_lanes(record, &[("-".to_owned(), value)]).await;
    }

    /// Sets each lane's counter; `set_done` once every one is answered.
    async fn set_lanes(&self, record: &Mutex<SectionRecord>, values: &[(String, u64)]) {
        let mut data = self.data.clone();
        lock(record).set_sent = true;
        for (lane, value) in values {
            let () = redis::cmd("SET")
                .arg(self.keys.counter_of(lane))
                .arg(value)
                .query_async(&mut data)
                .await
                .expect("data server: SET counter");
        }
        lock(record).set_done = now_ns();
    }

    async fn fenced_write(&self, record: &Mutex<SectionRecord>) {
        let (id, token) = {
            let r = lock(record);
            (r.id(), r.token)
        };
        self.fenced_lanes(record, &id, &[("-".to_owned(), token)], "max")
            .await;
    }

    /// One fenced write per lane (`mode`: see [`FENCED_WRITE`]); the
    /// section's `fenced` is whether every one was accepted.
    async fn fenced_lanes(
        &self,
        record: &Mutex<SectionRecord>,
        id: &str,
        lanes: &[(String, u64)],
        mode: &str,
    ) {
        let mut data = self.data.clone();
        let mut all_ok = true;
        for (lane, token) in lanes {
            let fence = if mode == "unique" {
                format!("{}:seen", self.keys.fence_hi)
            } else {
                self.keys.fence_of(lane)
            };
            let ok: i64 = self
                .fenced
                .key(fence)
                .key(&self.keys.fence_log)
                .arg(token)
                .arg(id)
                .arg(mode)
                .arg(lane)
                .invoke_async(&mut data)
                .await
                .expect("data server: fenced write");
            all_ok &= ok == 1;
        }
        let mut r = lock(record);
        r.fence_done = now_ns();
        r.fenced = Some(all_ok);
    }

    /// Records the start of a section and announces it as the holder.
    async fn announce(&self, record: &Mutex<SectionRecord>, body: Duration) {
        let id = {
            let mut r = lock(record);
            r.start = now_ns();
            if r.token == 0 {
                r.token = leasehold::fencing_token().unwrap_or(0);
            }
            r.id()
        };
        let mut data = self.data.clone();
        let () = redis::cmd("SET")
            .arg(&self.keys.holder)
            .arg(format!("{} {} {id}", self.cfg.id, body.as_millis()))
            .query_async(&mut data)
            .await
            .expect("data server: SET holder");
    }

    /// The critical section run by `LockRequest::run` (or raced against
    /// the guard's `lost()` for `lock_all`): dropped at its next await
    /// point if the lease is lost.
    async fn body(&self, record: &Mutex<SectionRecord>, body: Duration, role: &Role) {
        let _end = EndOnDrop(record);
        self.announce(record, body).await;
        match role {
            Role::Read => {
                let _ = self.get_counter().await;
                tokio::time::sleep(body).await;
            }
            Role::Permit(_) => {
                tokio::time::sleep(body).await;
                let (id, token) = {
                    let r = lock(record);
                    (r.id(), r.token)
                };
                self.fenced_lanes(record, &id, &[("-".to_owned(), token)], "unique")
                    .await;
            }
            Role::Lock | Role::Write | Role::All(_) => {
                let (id, lanes) = {
                    let r = lock(record);
                    (r.id(), r.lane_tokens())
                };
                let mut values = Vec::with_capacity(lanes.len());
                for (lane, _) in &lanes {
                    values.push((lane.clone(), self.get_lane(lane).await + 1));
                }
                tokio::time::sleep(body).await;
                self.set_lanes(record, &values).await;
                self.fenced_lanes(record, &id, &lanes, "max").await;
            }
        }
        lock(record).end = now_ns();
    }

    /// One section of `role`: acquire, run the body, release.
    async fn section(
        &self,
        record: &Mutex<SectionRecord>,
        body: Duration,
        role: &Role,
    ) -> Result<(), LockError> {
        if *role == Role::Lock {
            return self
                .request_for(role)
                .run(self.body(record, body, role))
                .await;
        }
        // The family holds a guard: `lock_all` offers every key's token on
        // it only, and its validity deadline is read from it.
        let guard = self.request_for(role).acquire().await?;
        {
            let mut r = lock(record);
            r.token = guard.fencing_token();
            if let Role::All(_) = role {
                let mut tokens = Vec::new();
                for lane in role.lanes() {
                    let token = guard
                        .fencing_token_of(&format!("{}:{lane}", self.cfg.ns))
                        .unwrap_or(0);
                    tokens.push(format!("{lane}={token}"));
                }
                r.role = format!("a:{}", tokens.join(","));
            }
        }
        // The deadline as the guard knows it, read again and again while
        // held: a renewal moves it, a loss fixes it (the last value read
        // is then the deadline that passed).
        let watch = async {
            loop {
                let deadline = now_ns() + guard.remaining().as_nanos() as u64;
                if guard.is_held() {
                    lock(record).valid_until = deadline;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        // Biased, body first: its first poll records the section's start,
        // so a lease lost before then still shows as a section (from the
        // grant's side) instead of vanishing from the checker's view.
        tokio::select! {
            biased;
            () = self.body(record, body, role) => {
                // As `run` does: the body finished; a failed release (the
                // lease lapsed meanwhile) is not the section's failure.
                let _ = guard.release().await;
                Ok(())
            }
            () = guard.lost() => Err(LockError::Lost {
                key: guard.key().to_owned(),
                cause: guard.lost_cause().unwrap_or(leasehold::LostCause::Expired),
            }),
            () = watch => unreachable!("the watch never ends"),
        }
    }

    fn log(&self, record: &SectionRecord) {
        lock(&self.log).push(record.to_line());
    }

    async fn task(self: Arc<Self>, task: usize) {
        let bodies = &self.cfg.bodies_ms;
        let mut froze = false;
        let mut seq = 0;
        while !self.stopping() {
            seq += 1;
            let role = self.role(task, seq);
            let record = Mutex::new(SectionRecord {
                proc: self.cfg.id,
                task,
                seq,
                role: match &role {
                    Role::Lock => "l".to_owned(),
                    Role::Permit(n) => format!("s{n}"),
                    Role::Read => "r".to_owned(),
                    Role::Write => "w".to_owned(),
                    Role::All(_) => "a:".to_owned(),
                },
                ..SectionRecord::default()
            });
            if task == 0 && !froze && self.cfg.freeze_after_ns.is_some_and(|t| now_ns() >= t) {
                froze = self.frozen_section(&record).await;
                continue;
            }
            let body = Duration::from_millis(bodies[(task + seq as usize) % bodies.len()]);
            let section = self.section(&record, body, &role);
            let mut section = std::pin::pin!(section);
            // At the stop, give up waiting for the lock (but never drop a
            // section that started).
            let result = loop {
                tokio::select! {
                    result = &mut section => break Some(result),
                    () = tokio::time::sleep(Duration::from_millis(50)) => {
                        if self.stopping() && lock(&record).start == 0 {
                            break None;
                        }
                    }
                }
            };
            let Some(result) = result else { break };
            let ended = now_ns();
            let mut r = lock(&record).clone();
            let outcome = match &result {
                Ok(()) => "ok",
                Err(e) => self.errors.count(e),
            };
            if r.start == 0 {
                // Not acquired: let a failing backend breathe.
                if !matches!(result, Err(LockError::Busy { .. })) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                continue;
            }
            if r.end == 0 {
                r.end = ended;
            }
            r.outcome = outcome.to_owned();
            self.log(&r);
        }
    }

    /// A holder that is frozen between reading and writing the counter: it
    /// takes the lock with `acquire`, reads, announces its pid on the data
    /// server and blocks its thread for a while (the parent SIGSTOPs the
    /// process meanwhile, past the lease); then it writes without looking at
    /// the guard, as a process paused at the wrong moment would. Returns
    /// whether it happened.
    async fn frozen_section(&self, record: &Mutex<SectionRecord>) -> bool {
        let guard = match self.request().acquire().await {
            Ok(guard) => guard,
            Err(e) => {
                self.errors.count(&e);
                return false;
            }
        };
        {
            let mut r = lock(record);
            r.start = now_ns();
            r.token = guard.fencing_token();
            r.frozen = true;
        }
        let v = self.get_counter().await;
        let mut data = self.data.clone();
        let () = redis::cmd("SET")
            .arg(&self.keys.frozen)
            .arg(std::process::id())
            .query_async(&mut data)
            .await
            .expect("data server: SET frozen");
        // The parent freezes this process during this blocking sleep.
        std::thread::sleep(FREEZE_WINDOW);
        self.set_counter(record, v + 1).await;
        self.fenced_write(record).await;
        let mut r = lock(record).clone();
        r.end = now_ns();
        r.outcome = match guard.release().await {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("release-{}", self.errors.count(&e)),
        };
        self.log(&r);
        true
    }
}

/// Ends a section's interval when its body is dropped (the lease was lost):
/// at the drop, not when `run` returned after the loss; for the family, at
/// the validity deadline its guard knew if that came first (the drop comes
/// when the process next runs, measured once 25 ms late on a loaded
/// machine: the lease was no longer valid then).
struct EndOnDrop<'a>(&'a Mutex<SectionRecord>);

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        let mut r = lock(self.0);
        if r.start != 0 && r.end == 0 {
            r.end = match now_ns() {
                now if r.valid_until != 0 => now.min(r.valid_until),
                now => now,
            };
        }
    }
}

/// How long the frozen section blocks, waiting to be frozen.
pub const FREEZE_WINDOW: Duration = Duration::from_secs(2);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn connect(cfg: &WorkerConfig) -> LockClient {
    let mut last = None;
    for _ in 0..50 {
        let mut builder = LockClient::builder().name(format!("worker-{}", cfg.id));
        if let Some(ms) = cfg.restart_grace_ms {
            builder = builder.restart_grace(Duration::from_millis(ms));
        }
        if let Some((replicas, ms)) = cfg.replica_sync {
            builder = builder.replica_sync(replicas, Duration::from_millis(ms));
        }
        let connected = match &cfg.target {
            LockTarget::Single(url) => builder.connect(url).await,
            #[cfg(feature = "sentinel")]
            LockTarget::Sentinel { master, urls } => builder.connect_sentinel(master, urls).await,
            #[cfg(feature = "cluster")]
            LockTarget::Cluster(urls) => builder.connect_cluster(urls).await,
            LockTarget::Redlock(urls) => builder.connect_redlock(urls).await,
            #[allow(unreachable_patterns)]
            other => panic!(
                "worker {}: {other:?} needs leasehold's default features",
                cfg.id
            ),
        };
        match connected {
            Ok(client) => return client,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("worker {}: cannot connect: {last:?}", cfg.id);
}

async fn run_worker(cfg: WorkerConfig) {
    let client = connect(&cfg).await;
    // The data server is the checker's record, not under test: its replies
    // may be slow on a loaded machine (redis-rs' default 500 ms timeout
    // once failed a run at `SET frozen`), never lost.
    let data = redis::Client::open(cfg.data_url.as_str())
        .expect("data url")
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_response_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("data server connection");
    let worker = Arc::new(Worker {
        keys: DataKeys::new(&cfg.ns),
        cfg,
        client,
        data,
        fenced: redis::Script::new(FENCED_WRITE),
        stop: AtomicBool::new(false),
        errors: ErrorCounts::default(),
        log: Mutex::new(Vec::new()),
    });
    // Watch for the parent's stop key.
    let watcher = {
        let (stopping, stop) = (worker.clone(), worker.clone());
        watch_stop_key(
            worker.data.clone(),
            worker.keys.stop.clone(),
            move || stopping.stopping(),
            move || stop.stop.store(true, Ordering::SeqCst),
        )
    };
    let tasks: Vec<_> = (0..worker.cfg.tasks)
        .map(|t| tokio::spawn(worker.clone().task(t)))
        .collect();
    for t in tasks {
        t.await.expect("a worker task panicked");
    }
    watcher.abort();

    let e = &worker.errors;
    let mut lines = std::mem::take(&mut *lock(&worker.log));
    lines.push(format!(
        "E {} {} {} {} {}",
        e.busy.load(Ordering::Relaxed),
        e.backend.load(Ordering::Relaxed),
        e.lost.load(Ordering::Relaxed),
        e.other.load(Ordering::Relaxed),
        lock(&e.sample).clone().unwrap_or_default(),
    ));
    let mut file = std::fs::File::create(&worker.cfg.log_path).expect("worker log");
    for line in lines {
        writeln!(file, "{line}").expect("worker log write");
    }
    file.sync_all().expect("worker log sync");
}

/// Run only as a child of the fault scenarios (see `scenarios.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of the fault scenarios"]
async fn faults_worker() {
    let Ok(cfg) = std::env::var(WORKER_ENV) else {
        return;
    };
    let cfg: WorkerConfig = serde_json::from_str(&cfg).expect("worker config");
    run_worker(cfg).await;
}

/// A worker process's watch for its parent's stop key: every 50 ms until
/// `stopping()`, reads `key` on the data server and calls `stop()` once it
/// is there.
pub(crate) fn watch_stop_key(
    mut data: redis::aio::MultiplexedConnection,
    key: String,
    stopping: impl Fn() -> bool + Send + 'static,
    stop: impl Fn() + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stopping() {
            let found: Option<String> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut data)
                .await
                .unwrap_or(None);
            if found.is_some() {
                stop();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}
