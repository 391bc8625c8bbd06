//! The marketplace of *Redis in Action*, chapter 6.2: sellers list items on a
//! market, buyers buy them, and three ways to keep a purchase correct:
//!
//! - **WATCH/MULTI/EXEC** (the book's chapter 4 `purchase_item`): optimistic;
//!   every listing and every purchase touches the market, so a buyer's
//!   `WATCH` on it is broken again and again and the purchase retried;
//! - **one market lock** (6.2.4): every purchase takes the same lock;
//! - **a lock per item** (6.2.5): a purchase locks only the item it buys.
//!
//! Listing is the same in all three (the book's `list_item`: `WATCH` on the
//! seller's own inventory, which nobody else touches). The locks are
//! leasehold locks. This file is a module of `examples/marketplace` and the
//! library `marketplace` of the `locks` benchmark (`lock-bench/`, scenario
//! S8). The store is a Redis server, or an in-process stand-in (the
//! example's fallback) whose WATCH is a version check and where every
//! operation yields once, standing for the round trip.
//!
//! Redis layout under a namespace `ns`: `{ns}market:` (sorted set
//! `"<n>.<seller>"` → price), `{ns}users:<id>` (hash, field `funds`),
//! `{ns}inventory:<id>` (set).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold::{LockClient, LockError};
use redis::aio::MultiplexedConnection;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What every buyer starts with: enough never to run out.
const BUYER_FUNDS: i64 = 1_000_000_000_000;
/// How long a purchase lock lasts, and how long a buyer waits for one.
const LOCK_TTL: Duration = Duration::from_secs(10);
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// How purchases are kept correct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Watch,
    MarketLock,
    ItemLock,
}

impl Variant {
    pub const ALL: [Variant; 3] = [Variant::Watch, Variant::MarketLock, Variant::ItemLock];

    /// Human name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Watch => "WATCH/MULTI/EXEC",
            Variant::MarketLock => "one market lock",
            Variant::ItemLock => "lock per item",
        }
    }

    /// Machine name.
    pub fn id(self) -> &'static str {
        match self {
            Variant::Watch => "watch",
            Variant::MarketLock => "market-lock",
            Variant::ItemLock => "item-lock",
        }
    }
}

/// How many sellers and buyers, for how long.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub sellers: usize,
    pub buyers: usize,
    pub duration: Duration,
}

impl Config {
    pub fn label(&self) -> String {
        format!("{} x {}", self.sellers, self.buyers)
    }
}

/// What one run did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub listed: u64,
    pub bought: u64,
    /// Purchases attempted again: an aborted EXEC, or a lock still busy after the wait.
    pub retries: u64,
    /// Purchases that found the item already sold (not retried: the buyer moves on).
    pub misses: u64,
    /// Per successful purchase, from the decision to buy until done (retries and lock waits included).
    pub latencies: Vec<Duration>,
    pub elapsed: Duration,
    /// Money conserved and every bought item in exactly one buyer's inventory.
    pub consistent: bool,
}

impl Outcome {
    pub fn listed_per_s(&self) -> f64 {
        per_s(self.listed, self.elapsed)
    }

    pub fn bought_per_s(&self) -> f64 {
        per_s(self.bought, self.elapsed)
    }

    pub fn retries_per_purchase(&self) -> f64 {
        if self.bought == 0 {
            return if self.retries == 0 {
                0.0
            } else {
                f64::INFINITY
            };
        }
        self.retries as f64 / self.bought as f64
    }

    /// The `q`-quantile of purchase latency (nearest rank).
    pub fn latency(&self, q: f64) -> Option<Duration> {
        if self.latencies.is_empty() {
            return None;
        }
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let n = sorted.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        Some(sorted[rank - 1])
    }
}

fn per_s(n: u64, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        0.0
    } else {
        n as f64 / elapsed.as_secs_f64()
    }
}

/// Where the market lives.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // one per program
pub enum Store {
    /// A Redis server; each seller and buyer gets its own connection (WATCH
    /// is per connection).
    Redis(redis::Client),
    /// In this process (the example's fallback when Redis is unreachable):
    /// every run gets a fresh market.
    Memory,
}

/// Run one simulation: `config.sellers` sellers listing and `config.buyers`
/// buyers buying for `config.duration`, purchases kept correct by `variant`
/// (the lock variants use `locks`). Keys live under the namespace `ns`.
pub async fn run(
    store: &Store,
    locks: &LockClient,
    variant: Variant,
    config: Config,
    ns: &str,
) -> Result<Outcome, BoxError> {
    let names = Names::new(ns);
    let store = &match store {
        Store::Redis(client) => Backing::Redis(client.clone()),
        Store::Memory => Backing::Memory(Arc::new(MemMarket::default())),
    };
    let sellers: Vec<String> = (0..config.sellers).map(|i| format!("seller{i}")).collect();
    let buyers: Vec<String> = (0..config.buyers).map(|i| format!("buyer{i}")).collect();

    let mut setup = Conn::open(store).await?;
    for s in &sellers {
        setup.set_funds(&names, s, 0).await?;
    }
    for b in &buyers {
        setup.set_funds(&names, b, BUYER_FUNDS).await?;
    }

    let start = Instant::now();
    let deadline = start + config.duration;
    let mut tasks = Vec::new();
    for (i, seller) in sellers.iter().enumerate() {
        let conn = Conn::open(store).await?;
        tasks.push(tokio::spawn(seller_loop(
            conn,
            names.clone(),
            seller.clone(),
            deadline,
            seed(i as u64),
        )));
    }
    for (i, buyer) in buyers.iter().enumerate() {
        let conn = Conn::open(store).await?;
        tasks.push(tokio::spawn(buyer_loop(
            conn,
            names.clone(),
            buyer.clone(),
            variant,
            locks.clone(),
            deadline,
            seed(1000 + i as u64),
        )));
    }
    let mut outcome = Outcome::default();
    for task in tasks {
        let part = task.await??;
        outcome.listed += part.listed;
        outcome.bought += part.bought;
        outcome.retries += part.retries;
        outcome.misses += part.misses;
        outcome.latencies.extend(part.latencies);
    }
    outcome.elapsed = start.elapsed();

    // Money conserved, and every purchase in exactly one inventory.
    let mut total = 0i64;
    for user in sellers.iter().chain(&buyers) {
        total += setup.funds(&names, user).await?;
    }
    let mut owned = 0u64;
    for b in &buyers {
        owned += setup.inventory_len(&names, b).await?;
    }
    outcome.consistent = total == BUYER_FUNDS * buyers.len() as i64 && owned == outcome.bought;
    Ok(outcome)
}

/// Delete everything a run left under `ns` on Redis: the market, users,
/// inventories and leasehold's lock and fence keys. No-op in memory.
pub async fn cleanup(store: &Store, ns: &str) -> Result<(), BoxError> {
    let Store::Redis(client) = store else {
        return Ok(());
    };
    let mut conn = client.get_multiplexed_async_connection().await?;
    for pattern in [format!("{ns}*"), format!("leasehold:{{{ns}*")] {
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            if !keys.is_empty() {
                redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async::<()>(&mut conn)
                    .await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(())
}

/// Outcome of one listed-or-bought attempt on the store.
enum Attempt {
    Done,
    /// Someone else bought it first.
    Gone,
    /// WATCH broken (or version changed): try again.
    Conflict,
}

#[derive(Default)]
struct Part {
    listed: u64,
    bought: u64,
    retries: u64,
    misses: u64,
    latencies: Vec<Duration>,
}

async fn seller_loop(
    mut conn: Conn,
    names: Names,
    seller: String,
    deadline: Instant,
    mut rng: u64,
) -> Result<Part, BoxError> {
    let mut part = Part::default();
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let member = format!("{n}.{seller}");
        let price = 1 + (next(&mut rng) % 100) as i64;
        conn.add_to_inventory(&names, &seller, &member).await?;
        loop {
            match conn.list_item(&names, &seller, &member, price).await? {
                Attempt::Done => {
                    part.listed += 1;
                    break;
                }
                Attempt::Conflict => continue,
                Attempt::Gone => break,
            }
        }
    }
    Ok(part)
}

async fn buyer_loop(
    mut conn: Conn,
    names: Names,
    buyer: String,
    variant: Variant,
    locks: LockClient,
    deadline: Instant,
    mut rng: u64,
) -> Result<Part, BoxError> {
    let mut part = Part::default();
    while Instant::now() < deadline {
        let Some(member) = conn.pick(&names, &mut rng).await? else {
            // Nothing listed yet.
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        let started = Instant::now();
        loop {
            let attempt = match variant {
                Variant::Watch => conn.purchase(&names, &buyer, &member, true).await?,
                Variant::MarketLock | Variant::ItemLock => {
                    let lock_name = match variant {
                        Variant::MarketLock => names.market_lock(),
                        _ => names.item_lock(&member),
                    };
                    let acquired = locks
                        .lock(lock_name)
                        .ttl(LOCK_TTL)
                        .wait(LOCK_WAIT)
                        .acquire()
                        .await;
                    match acquired {
                        Ok(guard) => {
                            let attempt = conn.purchase(&names, &buyer, &member, false).await;
                            guard.release().await?;
                            attempt?
                        }
                        Err(LockError::Busy { .. }) => Attempt::Conflict,
                        Err(other) => return Err(other.into()),
                    }
                }
            };
            match attempt {
                Attempt::Done => {
                    part.bought += 1;
                    part.latencies.push(started.elapsed());
                    break;
                }
                Attempt::Gone => {
                    part.misses += 1;
                    break;
                }
                Attempt::Conflict => {
                    part.retries += 1;
                    if Instant::now() >= deadline {
                        break;
                    }
                }
            }
        }
    }
    Ok(part)
}

#[derive(Clone)]
struct Names {
    ns: String,
    market: String,
}

impl Names {
    fn new(ns: &str) -> Names {
        Names {
            ns: ns.to_owned(),
            market: format!("{ns}market:"),
        }
    }

    fn user(&self, id: &str) -> String {
        format!("{}users:{id}", self.ns)
    }

    fn inventory(&self, id: &str) -> String {
        format!("{}inventory:{id}", self.ns)
    }

    fn market_lock(&self) -> String {
        format!("{}market", self.ns)
    }

    fn item_lock(&self, member: &str) -> String {
        format!("{}item:{member}", self.ns)
    }
}

/// The seller of a market member `"<n>.<seller>"`.
fn seller_of(member: &str) -> &str {
    member.rsplit_once('.').map_or(member, |(_, seller)| seller)
}

/// The store of one run.
#[allow(clippy::large_enum_variant)] // one per run
enum Backing {
    Redis(redis::Client),
    Memory(Arc<MemMarket>),
}

/// One actor's connection to the store.
enum Conn {
    Redis(MultiplexedConnection),
    Memory(Arc<MemMarket>),
}

impl Conn {
    async fn open(store: &Backing) -> Result<Conn, BoxError> {
        Ok(match store {
            Backing::Redis(client) => Conn::Redis(client.get_multiplexed_async_connection().await?),
            Backing::Memory(market) => Conn::Memory(market.clone()),
        })
    }

    /// In memory, every operation stands for a round trip: let the others run.
    async fn round_trip(&self) {
        if let Conn::Memory(_) = self {
            tokio::task::yield_now().await;
        }
    }

    async fn set_funds(&mut self, names: &Names, user: &str, funds: i64) -> Result<(), BoxError> {
        match self {
            Conn::Redis(c) => {
                redis::cmd("HSET")
                    .arg(names.user(user))
                    .arg("funds")
                    .arg(funds)
                    .query_async::<()>(c)
                    .await?
            }
            Conn::Memory(m) => {
                m.state().funds.insert(user.to_owned(), funds);
            }
        }
        Ok(())
    }

    async fn funds(&mut self, names: &Names, user: &str) -> Result<i64, BoxError> {
        Ok(match self {
            Conn::Redis(c) => redis::cmd("HGET")
                .arg(names.user(user))
                .arg("funds")
                .query_async::<Option<i64>>(c)
                .await?
                .unwrap_or(0),
            Conn::Memory(m) => m.state().funds.get(user).copied().unwrap_or(0),
        })
    }

    async fn inventory_len(&mut self, names: &Names, user: &str) -> Result<u64, BoxError> {
        Ok(match self {
            Conn::Redis(c) => {
                redis::cmd("SCARD")
                    .arg(names.inventory(user))
                    .query_async::<u64>(c)
                    .await?
            }
            Conn::Memory(m) => m
                .state()
                .inventories
                .get(user)
                .map_or(0, |s| s.len() as u64),
        })
    }

    async fn add_to_inventory(
        &mut self,
        names: &Names,
        user: &str,
        member: &str,
    ) -> Result<(), BoxError> {
        self.round_trip().await;
        match self {
            Conn::Redis(c) => {
                redis::cmd("SADD")
                    .arg(names.inventory(user))
                    .arg(member)
                    .query_async::<()>(c)
                    .await?
            }
            Conn::Memory(m) => {
                m.state()
                    .inventories
                    .entry(user.to_owned())
                    .or_default()
                    .insert(member.to_owned());
            }
        }
        Ok(())
    }

    /// The book's `list_item`: move an item from the seller's inventory to
    /// the market, WATCHing the inventory.
    async fn list_item(
        &mut self,
        names: &Names,
        seller: &str,
        member: &str,
        price: i64,
    ) -> Result<Attempt, BoxError> {
        self.round_trip().await;
        match self {
            Conn::Redis(c) => {
                let inventory = names.inventory(seller);
                redis::cmd("WATCH")
                    .arg(&inventory)
                    .query_async::<()>(c)
                    .await?;
                let present: bool = redis::cmd("SISMEMBER")
                    .arg(&inventory)
                    .arg(member)
                    .query_async(c)
                    .await?;
                if !present {
                    redis::cmd("UNWATCH").query_async::<()>(c).await?;
                    return Ok(Attempt::Gone);
                }
                let done: Option<(i64, i64)> = redis::pipe()
                    .atomic()
                    .zadd(&names.market, member, price)
                    .srem(&inventory, member)
                    .query_async(c)
                    .await?;
                Ok(if done.is_some() {
                    Attempt::Done
                } else {
                    Attempt::Conflict
                })
            }
            Conn::Memory(m) => Ok(m.list_item(seller, member, price)),
        }
    }

    /// A random listed item, if any.
    async fn pick(&mut self, names: &Names, rng: &mut u64) -> Result<Option<String>, BoxError> {
        self.round_trip().await;
        Ok(match self {
            Conn::Redis(c) => {
                redis::cmd("ZRANDMEMBER")
                    .arg(&names.market)
                    .query_async(c)
                    .await?
            }
            Conn::Memory(m) => m.pick(next(rng)),
        })
    }

    /// The book's `purchase_item`: with `watch`, WATCH the market and the
    /// buyer and let EXEC fail on any change; without, the caller holds a
    /// lock that makes the read-then-write safe.
    async fn purchase(
        &mut self,
        names: &Names,
        buyer: &str,
        member: &str,
        watch: bool,
    ) -> Result<Attempt, BoxError> {
        let seller = seller_of(member);
        match self {
            Conn::Redis(c) => {
                let buyer_key = names.user(buyer);
                if watch {
                    redis::cmd("WATCH")
                        .arg(&names.market)
                        .arg(&buyer_key)
                        .query_async::<()>(c)
                        .await?;
                }
                let (price, funds): (Option<f64>, Option<i64>) = redis::pipe()
                    .zscore(&names.market, member)
                    .hget(&buyer_key, "funds")
                    .query_async(c)
                    .await?;
                let (Some(price), Some(funds)) = (price, funds) else {
                    if watch {
                        redis::cmd("UNWATCH").query_async::<()>(c).await?;
                    }
                    return Ok(Attempt::Gone);
                };
                let price = price as i64;
                if price > funds {
                    if watch {
                        redis::cmd("UNWATCH").query_async::<()>(c).await?;
                    }
                    return Ok(Attempt::Gone);
                }
                let done: Option<redis::Value> = redis::pipe()
                    .atomic()
                    .hincr(names.user(seller), "funds", price)
                    .hincr(&buyer_key, "funds", -price)
                    .sadd(names.inventory(buyer), member)
                    .zrem(&names.market, member)
                    .query_async(c)
                    .await?;
                Ok(if done.is_some() {
                    Attempt::Done
                } else {
                    Attempt::Conflict
                })
            }
            Conn::Memory(m) => {
                // Read, "a round trip" (let others run), then commit: with
                // `watch` only if nothing changed meanwhile.
                let seen = m.read(member, buyer);
                tokio::task::yield_now().await;
                Ok(m.commit(seen, member, seller, buyer, watch))
            }
        }
    }
}

/// The in-process market (one per run): the same data, one mutex, and a version number
/// that every change of the market bumps (what WATCH detects on Redis).
#[derive(Default)]
struct MemMarket {
    state: Mutex<MemState>,
}

#[derive(Default)]
struct MemState {
    version: u64,
    /// Listed members, for a uniform random pick; `index` maps each to its
    /// place here and its price.
    items: Vec<String>,
    index: HashMap<String, (usize, i64)>,
    funds: HashMap<String, i64>,
    inventories: HashMap<String, HashSet<String>>,
}

/// What a purchase read: the market version and the item's price.
struct Seen {
    version: u64,
    price: Option<i64>,
}

impl MemMarket {
    fn state(&self) -> std::sync::MutexGuard<'_, MemState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn list_item(&self, seller: &str, member: &str, price: i64) -> Attempt {
        let mut s = self.state();
        let removed = s
            .inventories
            .get_mut(seller)
            .is_some_and(|inv| inv.remove(member));
        if !removed {
            return Attempt::Gone;
        }
        let at = s.items.len();
        s.items.push(member.to_owned());
        s.index.insert(member.to_owned(), (at, price));
        s.version += 1;
        Attempt::Done
    }

    fn pick(&self, random: u64) -> Option<String> {
        let s = self.state();
        if s.items.is_empty() {
            return None;
        }
        Some(s.items[(random % s.items.len() as u64) as usize].clone())
    }

    fn read(&self, member: &str, _buyer: &str) -> Seen {
        let s = self.state();
        Seen {
            version: s.version,
            price: s.index.get(member).map(|&(_, price)| price),
        }
    }

    fn commit(&self, seen: Seen, member: &str, seller: &str, buyer: &str, watch: bool) -> Attempt {
        let mut s = self.state();
        if watch && s.version != seen.version {
            return Attempt::Conflict;
        }
        let (Some(price), Some(&(at, _))) = (seen.price, s.index.get(member)) else {
            return Attempt::Gone;
        };
        if s.funds.get(buyer).copied().unwrap_or(0) < price {
            return Attempt::Gone;
        }
        // Remove from the market (swap-remove, fixing the moved item's index).
        s.index.remove(member);
        s.items.swap_remove(at);
        if let Some(moved) = s.items.get(at).cloned()
            && let Some(entry) = s.index.get_mut(&moved)
        {
            entry.0 = at;
        }
        *s.funds.entry(seller.to_owned()).or_default() += price;
        *s.funds.entry(buyer.to_owned()).or_default() -= price;
        s.inventories
            .entry(buyer.to_owned())
            .or_default()
            .insert(member.to_owned());
        s.version += 1;
        Attempt::Done
    }
}

fn seed(i: u64) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1
}

/// xorshift64*: enough randomness to pick items.
fn next(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// The results table, as the example prints it.
pub fn table(rows: &[(Config, Variant, Outcome)]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<8} {:<18} {:>11} {:>11} {:>9} {:>7} {:>10} {:>10} {:>5}\n",
        "sellers",
        "purchases kept by",
        "listed/s",
        "bought/s",
        "retries",
        "misses",
        "p50 ms",
        "p99 ms",
        "ok"
    ));
    out.push_str(&format!(
        "{:<8} {:<18} {:>11} {:>11} {:>9} {:>7} {:>10} {:>10} {:>5}\n",
        "x buyers", "", "", "", "/purchase", "", "purchase", "purchase", ""
    ));
    for (config, variant, o) in rows {
        let ms = |q| o.latency(q).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
        out.push_str(&format!(
            "{:<8} {:<18} {:>11.0} {:>11.0} {:>9.2} {:>7} {:>10.3} {:>10.3} {:>5}\n",
            config.label(),
            variant.name(),
            o.listed_per_s(),
            o.bought_per_s(),
            o.retries_per_purchase(),
            o.misses,
            ms(0.5),
            ms(0.99),
            if o.consistent { "yes" } else { "NO" }
        ));
    }
    out
}
