//! The noon lottery draw, on three instances of one service.
//!
//! Every instance wakes at "noon" and calls `draw_winners(today)`. The
//! `#[distributed_lock]` attribute makes sure exactly one of them draws: the
//! others find the lock taken and skip. The winner writes the result with its
//! fencing token, and the store refuses a write whose token is older than
//! the last one it accepted, so even a drawer paused past its lease could not
//! overwrite a newer draw.
//!
//! Run it with `cargo run -p leasehold-examples --example lottery` (Redis at
//! `REDIS_URL`, default `redis://127.0.0.1:6379`; without a Redis it says so
//! and runs in memory).
//!
//! `at_least = "30s"` keeps the day's lock for 30 s even though the draw
//! takes milliseconds, so an instance whose clock is a little late cannot
//! draw a second time: run the example twice within 30 s and the second run
//! reports that today's draw already happened.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::{LockClient, LockError, distributed_lock};

type UserId = u32;

const ELIGIBLE_USERS: u32 = 1_000;
const WINNERS: usize = 10;
const INSTANCES: usize = 3;

/// A calendar date (UTC), displayed as `YYYY-MM-DD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Date {
    year: i64,
    month: u32,
    day: u32,
}

impl Date {
    fn today() -> Date {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Date::from_days(i64::try_from(secs / 86_400).unwrap_or(0))
    }

    /// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    fn from_days(days: i64) -> Date {
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
        let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
        let year = yoe + era * 400 + i64::from(month <= 2);
        Date { year, month, day }
    }
}

impl std::fmt::Display for Date {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Store(String),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppError::Lock(e) => write!(f, "{e}"),
            AppError::Store(e) => write!(f, "store: {e}"),
        }
    }
}

/// Where the draw's result goes: Redis, or memory without one. Both refuse
/// a write whose fencing token is not newer than the stored one.
#[derive(Clone)]
enum WinnerStore {
    Redis(redis::aio::ConnectionManager),
    Memory(Arc<Mutex<HashMap<String, (u64, String)>>>),
}

/// KEYS[1] the day's result (hash: token, by, winners)
/// ARGV[1] fencing token, ARGV[2] instance name, ARGV[3] winners (comma-separated)
/// Returns 1 written, 0 refused (a newer or equal token is already stored).
const FENCED_WRITE: &str = r"
local stored = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if stored >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'by', ARGV[2], 'winners', ARGV[3])
return 1
";

impl WinnerStore {
    async fn write(
        &self,
        date: Date,
        token: u64,
        by: &str,
        winners: &str,
    ) -> Result<bool, AppError> {
        let key = format!("lottery:winners:{date}");
        match self {
            WinnerStore::Redis(conn) => {
                let written: i64 = redis::Script::new(FENCED_WRITE)
                    .key(&key)
                    .arg(token)
                    .arg(by)
                    .arg(winners)
                    .invoke_async(&mut conn.clone())
                    .await
                    .map_err(|e| AppError::Store(e.to_string()))?;
                Ok(written == 1)
            }
            WinnerStore::Memory(map) => {
                let mut map = map.lock().map_err(|e| AppError::Store(e.to_string()))?;
                match map.get(&key) {
                    Some((stored, _)) if *stored >= token => Ok(false),
                    _ => {
                        map.insert(key, (token, format!("{by}: {winners}")));
                        Ok(true)
                    }
                }
            }
        }
    }

    async fn read(&self, date: Date) -> Option<String> {
        let key = format!("lottery:winners:{date}");
        match self {
            WinnerStore::Redis(conn) => {
                let fields: HashMap<String, String> = redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(&mut conn.clone())
                    .await
                    .ok()?;
                Some(format!(
                    "drawn by {} with fencing token {}: {}",
                    fields.get("by")?,
                    fields.get("token")?,
                    fields.get("winners")?
                ))
            }
            WinnerStore::Memory(map) => map
                .lock()
                .ok()?
                .get(&key)
                .map(|(t, w)| format!("token {t}, {w}")),
        }
    }
}

/// One instance of the service: its own lock client, like a separate machine.
struct Instance {
    name: String,
    locks: LockClient,
    store: WinnerStore,
}

impl Instance {
    /// Draw today's winners. Runs on one instance only; on the others the
    /// attribute returns `Err(AppError::Lock(LockError::Busy { .. }))`.
    #[distributed_lock(key = "draw:<date>", ttl = "10s", renew, at_least = "30s", client = self.locks.clone())]
    async fn draw_winners(&self, date: Date) -> Result<Vec<UserId>, AppError> {
        let token = leasehold::fencing_token().unwrap_or(0);
        let winners = pick_winners(token ^ u64::from(date.day), WINNERS);
        // The draw takes a moment; the watchdog keeps the lease alive.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let list = winners
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        if !self.store.write(date, token, &self.name, &list).await? {
            return Err(AppError::Store(format!(
                "refused: a draw with a newer fencing token than {token} is already stored"
            )));
        }
        Ok(winners)
    }
}

/// `count` distinct users out of the eligible ones (xorshift, seeded).
fn pick_winners(seed: u64, count: usize) -> Vec<UserId> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut winners = Vec::with_capacity(count);
    while winners.len() < count {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let user = u32::try_from(state % u64::from(ELIGIBLE_USERS)).unwrap_or(0) + 1;
        if !winners.contains(&user) {
            winners.push(user);
        }
    }
    winners.sort_unstable();
    winners
}

/// Connect an instance's lock client, or say why not.
async fn connect(url: &str) -> Result<LockClient, LockError> {
    LockClient::builder()
        .connect_timeout(Duration::from_millis(500))
        .connect(url)
        .await
}

#[tokio::main]
async fn main() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let date = Date::today();

    let (store, clients): (WinnerStore, Vec<LockClient>) = match connect(&url).await {
        Ok(first) => {
            let conn = async {
                redis::Client::open(url.as_str())?
                    .get_connection_manager()
                    .await
            }
            .await;
            match conn {
                Ok(conn) => {
                    let mut clients = vec![first];
                    for _ in 1..INSTANCES {
                        match connect(&url).await {
                            Ok(c) => clients.push(c),
                            Err(e) => {
                                eprintln!("could not connect another instance: {e}");
                                return;
                            }
                        }
                    }
                    println!("Using Redis at {url}.");
                    (WinnerStore::Redis(conn), clients)
                }
                Err(e) => {
                    eprintln!("could not open a store connection: {e}");
                    return;
                }
            }
        }
        Err(e) => {
            println!("No Redis answered at {url} ({e}).");
            println!(
                "Notice: running with leasehold's in-memory backend instead (one process, same semantics)."
            );
            let clients = (0..INSTANCES).map(|_| LockClient::in_memory()).collect();
            (WinnerStore::Memory(Arc::default()), clients)
        }
    };

    let instances: Vec<Arc<Instance>> = clients
        .into_iter()
        .enumerate()
        .map(|(i, locks)| {
            Arc::new(Instance {
                name: format!("instance-{}", i + 1),
                locks,
                store: store.clone(),
            })
        })
        .collect();

    println!(
        "It is noon on {date}: {INSTANCES} instances race to draw {WINNERS} winners out of {ELIGIBLE_USERS} users.\n"
    );
    let noon = Arc::new(tokio::sync::Barrier::new(INSTANCES));
    let runs: Vec<_> = instances
        .iter()
        .map(|instance| {
            let (instance, noon) = (instance.clone(), noon.clone());
            tokio::spawn(async move {
                noon.wait().await;
                let result = instance.draw_winners(date).await;
                (instance.name.clone(), result)
            })
        })
        .collect();

    let mut drew = 0;
    for run in runs {
        let Ok((name, result)) = run.await else {
            eprintln!("an instance panicked");
            continue;
        };
        match result {
            Ok(winners) => {
                drew += 1;
                println!("{name}: drew the winners {winners:?}");
            }
            Err(AppError::Lock(LockError::Busy { key })) => {
                println!(
                    "{name}: skipped, `{key}` is taken (another instance is drawing, or drew less than 30 s ago)"
                );
            }
            Err(e) => println!("{name}: failed: {e}"),
        }
    }

    println!();
    match store.read(date).await {
        Some(record) => println!("Winners on record for {date}: {record}"),
        None => println!("No winners on record for {date}."),
    }
    match drew {
        1 => println!("Exactly one instance drew."),
        0 => println!(
            "No instance drew in this run: today's draw already happened (the lock is kept 30 s by at_least)."
        ),
        n => println!("BUG: {n} instances drew."),
    }
}
