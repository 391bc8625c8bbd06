//! One backend under test: a fresh `redis-server`, or the in-memory store
//! under a prefix of its own.

use std::sync::atomic::{AtomicU64, Ordering};

use leasehold::LockClient;

use crate::support::RedisServer;

pub enum Fixture {
    Redis(RedisServer),
    Memory { prefix: String },
}

static NEXT_PREFIX: AtomicU64 = AtomicU64::new(0);

impl Fixture {
    pub fn redis() -> Fixture {
        Fixture::Redis(RedisServer::start())
    }

    pub fn memory() -> Fixture {
        Fixture::Memory {
            prefix: format!(
                "test{}-{}:",
                std::process::id(),
                NEXT_PREFIX.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// A new, independent client (its own connections, watchdog, reentrancy).
    pub async fn client(&self) -> LockClient {
        match self {
            Fixture::Redis(server) => LockClient::connect(&server.url())
                .await
                .expect("connect to the test redis-server"),
            Fixture::Memory { prefix } => LockClient::builder().prefix(prefix.clone()).in_memory(),
        }
    }

    pub fn server(&self) -> Option<&RedisServer> {
        match self {
            Fixture::Redis(server) => Some(server),
            Fixture::Memory { .. } => None,
        }
    }
}

/// Poll `condition` every 10 ms until it holds; fail with `what` after 10 s
/// (a hang guard, not a timing assertion).
pub async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Take `key` and give it back at once.
pub async fn take_and_give_back(client: &LockClient, key: &str) {
    let guard = client
        .lock(key)
        .acquire()
        .await
        .expect("acquire a free lock");
    guard.release().await.expect("release our own lock");
}

/// Instantiate each listed `async fn(Fixture)` once per backend:
/// `name::redis` and `name::memory`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn redis() {
                    super::$name($crate::fixture::Fixture::redis()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$name($crate::fixture::Fixture::memory()).await;
                }
            }
        )*
    };
}

/// Every command the server ran since `SLOWLOG RESET` (logged with a
/// threshold of 0), oldest first, as argument lists.
pub fn commands_logged(server: &RedisServer) -> Vec<Vec<String>> {
    let redis::Value::Array(entries) = server.cmd(&["SLOWLOG", "GET", "100000"]) else {
        panic!("SLOWLOG GET");
    };
    let mut all: Vec<Vec<String>> = entries
        .into_iter()
        .map(|entry| match entry {
            redis::Value::Array(parts) => match parts.into_iter().nth(3) {
                Some(redis::Value::Array(args)) => {
                    args.into_iter().filter_map(logged_text).collect()
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect();
    all.reverse();
    all
}

/// Log every command from now on (`SLOWLOG` with a threshold of 0).
pub fn log_every_command(server: &RedisServer) {
    server.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    server.cmd(&["CONFIG", "SET", "slowlog-max-len", "100000"]);
    server.cmd(&["SLOWLOG", "RESET"]);
}

/// A logged argument as text (`None`: not a string).
fn logged_text(v: redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        redis::Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// How many of `commands` are `EVALSHA` of `source`.
pub fn evalsha_of(commands: &[Vec<String>], source: &str) -> usize {
    let sha = redis::Script::new(source).get_hash().to_owned();
    commands
        .iter()
        .filter(|c| c.first().is_some_and(|n| n.eq_ignore_ascii_case("evalsha")))
        .filter(|c| c.get(1).is_some_and(|s| s.eq_ignore_ascii_case(&sha)))
        .count()
}
