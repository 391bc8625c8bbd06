//! One leader among three instances: it runs a periodic task, the others
//! stand by; kill the leader and watch another take over.
//!
//! Run it with `cargo run -p leasehold-examples --example leader` (Redis at
//! `REDIS_URL`, default `redis://127.0.0.1:6379`).
//!
//! - With Redis, the instances are three processes (this program run with
//!   `--instance N`). After a few ticks the leader is killed with SIGKILL,
//!   as a crash would: it gives nothing back, and a standby takes over when
//!   its lease (2 s) runs out.
//! - Without a Redis it says so and runs the three instances in this
//!   process, on the in-memory backend; "killing" the leader there stops its
//!   task, which resigns, and the next in line leads at once.
//!
//! Every tick writes to a store with the leader's term, and the store
//! refuses a term lower than one it has seen: a leader paused past its
//! lease (a GC pause, a frozen VM) cannot overwrite its successor's writes.

use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{Election, LockClient, LockError};
use tokio::time::Instant;

const INSTANCES: usize = 3;
const ELECTION: &str = "leader-example";
const TTL: Duration = Duration::from_secs(2);
const TICK: Duration = Duration::from_millis(400);

/// Where the leader writes: refuses a write from an older term.
#[derive(Clone)]
enum Store {
    Redis(redis::aio::ConnectionManager),
    Memory(Arc<Mutex<u64>>),
}

/// Accept `term`'s write unless a later term has written already.
const FENCED_WRITE: &str = r"
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < last then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1";

impl Store {
    async fn write(&self, term: u64) -> Result<bool, redis::RedisError> {
        match self {
            Store::Redis(conn) => {
                let mut conn = conn.clone();
                let accepted: i64 = redis::Script::new(FENCED_WRITE)
                    .key("leader-example:last-term")
                    .arg(term)
                    .invoke_async(&mut conn)
                    .await?;
                Ok(accepted == 1)
            }
            Store::Memory(last) => {
                let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
                if term < *last {
                    return Ok(false);
                }
                *last = term;
                Ok(true)
            }
        }
    }
}

/// One instance: campaigns, and while it leads, ticks with its term.
async fn lead(name: String, election: Election, store: Store) -> Result<(), LockError> {
    election
        .run_while_leader(|term| {
            let (name, store) = (name.clone(), store.clone());
            async move {
                println!("{name}: elected, term {term}");
                let mut ticks = tokio::time::interval(TICK);
                loop {
                    ticks.tick().await;
                    match store.write(term).await {
                        Ok(true) => println!("{name}: tick (term {term})"),
                        Ok(false) => {
                            println!("{name}: the store refused term {term}: a newer leader wrote")
                        }
                        Err(e) => println!("{name}: store error: {e}"),
                    }
                }
            }
        })
        .await
}

async fn connect(url: &str, name: &str) -> Result<LockClient, LockError> {
    LockClient::builder()
        .name(name)
        .connect_timeout(Duration::from_millis(500))
        .connect(url)
        .await
}

#[tokio::main]
async fn main() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, n] = &args[..]
        && flag == "--instance"
    {
        return instance(&url, n).await;
    }
    match connect(&url, "observer").await {
        Ok(observer) => in_processes(&url, observer).await,
        Err(e) => {
            println!("No Redis answered at {url} ({e}).");
            println!(
                "Notice: running with leasehold's in-memory backend instead (three instances in one process)."
            );
            in_memory().await;
        }
    }
}

/// A child process: one instance, until killed.
async fn instance(url: &str, n: &str) {
    let name = format!("instance-{n}");
    let client = match connect(url, &name).await {
        Ok(client) => client,
        Err(e) => return eprintln!("{name}: {e}"),
    };
    let store = match redis::Client::open(url) {
        Ok(redis) => match redis.get_connection_manager().await {
            Ok(conn) => Store::Redis(conn),
            Err(e) => return eprintln!("{name}: {e}"),
        },
        Err(e) => return eprintln!("{name}: {e}"),
    };
    if let Err(e) = lead(name.clone(), client.election(ELECTION).ttl(TTL), store).await {
        eprintln!("{name}: {e}");
    }
}

/// Three processes; the leader is killed with SIGKILL.
async fn in_processes(url: &str, observer: LockClient) {
    println!("Using Redis at {url}: three instance processes, a lease of {TTL:?}.\n");
    let Ok(exe) = std::env::current_exe() else {
        return eprintln!("cannot find this program to start the instances");
    };
    let mut children: Vec<(String, Child)> = Vec::new();
    for n in 1..=INSTANCES {
        match Command::new(&exe)
            .args(["--instance", &n.to_string()])
            .spawn()
        {
            Ok(child) => children.push((format!("instance-{n}"), child)),
            Err(e) => return eprintln!("cannot start an instance: {e}"),
        }
    }
    let election = observer.election(ELECTION).ttl(TTL);
    let result = observe_and_kill(&election, |holder| {
        if let Some((_, child)) = children.iter_mut().find(|(name, _)| name == holder) {
            let _ = child.kill();
            let _ = child.wait();
        }
    })
    .await;
    for (_, child) in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    if let Err(e) = result {
        eprintln!("{e}");
    }
}

/// Three instances in this process, on the in-memory backend.
async fn in_memory() {
    let store = Store::Memory(Arc::default());
    let mut tasks = Vec::new();
    for n in 1..=INSTANCES {
        let name = format!("instance-{n}");
        let client = LockClient::builder().name(name.clone()).in_memory();
        let election = client.election(ELECTION).ttl(TTL);
        tasks.push((
            name.clone(),
            tokio::spawn(lead(name, election, store.clone())),
        ));
    }
    let observer = LockClient::builder().name("observer").in_memory();
    let election = observer.election(ELECTION).ttl(TTL);
    let result = observe_and_kill(&election, |holder| {
        if let Some((_, task)) = tasks.iter().find(|(name, _)| name == holder) {
            task.abort();
        }
    })
    .await;
    for (_, task) in &tasks {
        task.abort();
    }
    if let Err(e) = result {
        eprintln!("{e}");
    }
}

/// Follow the election; after a few ticks kill the leader with `kill`, and
/// report who took over and how long it took.
async fn observe_and_kill(
    election: &Election,
    mut kill: impl FnMut(&str),
) -> Result<(), LockError> {
    let mut leader = election.watch().await?;
    let first = loop {
        if let Some(info) = leader.borrow_and_update().clone() {
            break info;
        }
        if leader.changed().await.is_err() {
            return Ok(());
        }
    };
    println!(
        "observer: {} leads (term {})",
        first.holder, first.fencing_token
    );
    tokio::time::sleep(TICK * 4).await;

    println!("observer: killing {}", first.holder);
    kill(&first.holder);
    let killed_at = Instant::now();
    let next = loop {
        if leader.changed().await.is_err() {
            return Ok(());
        }
        let now = leader.borrow_and_update().clone();
        if let Some(info) = now.filter(|info| info.fencing_token != first.fencing_token) {
            break info;
        }
    };
    println!(
        "observer: {} took over after {:?} (term {} > {})",
        next.holder,
        killed_at.elapsed(),
        next.fencing_token,
        first.fencing_token
    );
    tokio::time::sleep(TICK * 4).await;
    Ok(())
}
