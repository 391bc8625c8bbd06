//! The `#[distributed_lock]` attribute of [leasehold](https://docs.rs/leasehold).
//!
//! Use it through the facade, as `leasehold::distributed_lock`: the generated code
//! refers to the `leasehold` crate.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod attr;
mod cron;
mod duration;
mod expand;
mod leader;
mod rewrite;
mod suggest;
mod template;

use proc_macro::TokenStream;

/// Runs an `async fn` only while it holds a distributed lock.
///
/// ```
/// use leasehold::{distributed_lock, LockClient, LockError};
///
/// #[derive(Debug, PartialEq)]
/// enum AppError { Lock(LockError) }
/// impl From<LockError> for AppError {
///     fn from(e: LockError) -> Self { AppError::Lock(e) }
/// }
///
/// #[distributed_lock(key = "draw:<date>", ttl = "10s", renew)]
/// async fn draw_winners(date: &str) -> Result<Vec<u32>, AppError> {
///     // Runs on one instance at a time for a given date.
///     Ok(vec![7, 42])
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // In a service: LockClient::connect("redis://…").await?. The in-memory
/// // backend keeps these examples self-contained; it never leaves the process.
/// leasehold::set_global_client(LockClient::in_memory());
/// assert_eq!(draw_winners("2026-11-21").await, Ok(vec![7, 42]));
/// # }
/// ```
///
/// Each call renders the key, takes the lock, runs the body while the lock is held,
/// and releases it when the body finishes (even by `?`, `return` or a panic). Run
/// the function on five instances at once: one runs the body, the others get the
/// lock failure (see [below](#when-the-lock-is-not-held)).
///
/// # Options
///
/// | option | meaning | default |
/// | --- | --- | --- |
/// | `key = "…"` | **required** (unless `keys`): the name of the lock, a [template](#key-templates) | — |
/// | `keys = ["…", "…"]` | instead of `key`: [all of these locks at once](#permits--5-read--write-keys--), templates too | — |
/// | `permits = 5` | `key` is a [counting semaphore](#permits--5-read--write-keys--) of that many permits | off |
/// | `read` / `write` | the read or write side of the [rw lock](#permits--5-read--write-keys--) on `key` | off |
/// | `ttl = "10s"` | lease length ([duration](#durations)) | `"30s"` |
/// | `renew` | keep the lease alive while the body runs (a bare flag) | off |
/// | `wait = "2s"` | wait this long for a busy lock before giving up | one try (skip if locked) |
/// | `at_least = "30s"` | keep the key this long after the start, even if the body finishes sooner | off |
/// | `max_hold = "10m"` | with `renew`: stop renewing this long after the start | off |
/// | `every = "1m"` | key the lock by its wall-clock slot: [once per period](#every--1m) across processes | off |
/// | `cron = "0 0 3 * * *"` | key the lock by the cron schedule's latest fire: [once per fire](#cron--0-0-3---) across processes | off |
/// | `client = expr` | the `LockClient` to use | the global client |
/// | `crate = "path"` | the path of the `leasehold` crate in generated code | `"::leasehold"` |
///
/// Options are separated by commas, each given at most once, in any order.
///
/// ## `key = "…"`
///
/// The name of the lock. Two calls exclude each other when their rendered keys are
/// equal. Literal text with placeholders:
///
/// ## Key templates
///
/// - `<name>` is the parameter `name`, formatted with `Display`;
/// - `<name.field.field>` is a field of it (`<pair.0>` for a tuple field);
/// - `<self>` and `<self.field>` use the receiver of a method;
/// - a name bound by a parameter written as a pattern can be used too:
///   `Path(id): Path<u64>` gives `<id>`, `Point { x, y }: Point` gives `<x>` and
///   `<y>`, `(a, b): (u8, u8)` gives `<a>` and `<b>`;
/// - with [`every`](#every--1m) or [`cron`](#cron--0-0-3---), `<slot>` is the
///   slot (appended as `:<slot>` when the key does not place it);
/// - `<<` and `>>` are a literal `<` and `>`;
/// - `}` is not allowed in a key (leasehold wraps keys in a Redis Cluster hash tag);
///   `{id}`, as in `format!`, is an error that says to write `<id>`.
///
/// ```
/// use leasehold::{distributed_lock, LockClient};
///
/// struct Order { id: u64 }
/// struct Path<T>(T); // as axum's extractor
///
/// #[distributed_lock(key = "order:<order.id>")]
/// async fn pay(order: &Order) -> Option<u64> { Some(order.id) }
///
/// #[distributed_lock(key = "refund:<id>")]
/// async fn refund(Path(id): Path<u64>) -> Option<u64> { Some(id) }
///
/// struct Shard { id: u32 }
///
/// impl Shard {
///     #[distributed_lock(key = "shard:<self.id>:compact")]
///     async fn compact(&self) -> Option<u32> { Some(self.id) }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), leasehold::LockError> {
/// leasehold::set_global_client(LockClient::in_memory());
/// assert_eq!(pay(&Order { id: 7 }).await, Some(7));
/// assert_eq!(Shard { id: 3 }.compact().await, Some(3));
///
/// // Held elsewhere under the rendered key "refund:8": the call is skipped.
/// let held = LockClient::in_memory().lock("refund:8").acquire().await?;
/// assert_eq!(refund(Path(8)).await, None);
/// held.release().await?;
/// assert_eq!(refund(Path(8)).await, Some(8));
/// # Ok(()) }
/// ```
///
/// Placeholders are checked at compile time: each must name a parameter of the
/// function, a name bound by one, or `self`; a parameter that binds no name
/// (`_: T`, `Path(_): Path<T>`) cannot be used, and the error says how to bind
/// it. The key is rendered when the function is called, before the body runs
/// (so before the body takes ownership of the arguments). A key without
/// placeholders is passed as is, without `format!`.
///
/// ## Durations
///
/// `ttl`, `wait`, `at_least`, `max_hold` and `every` take a string: a number
/// followed by a unit, `ms`, `s`, `m` (minutes) or `h`, or a combination from the
/// largest unit down, as in `"500ms"`, `"10s"`, `"5m"`, `"1m30s"`, `"1h2m3s500ms"`.
/// Durations are checked at compile time: no whitespace, no fractions, no other
/// units (`"1d"`, and `"10M"` is not months), a unit after every number
/// (`"1h30"` is an error that suggests `"1h30m"`), greater than zero, and within
/// what the request builder accepts, so that no call fails for it at run time:
/// a `ttl` of at least 10 ms (`leasehold::MIN_TTL`), at most 365 days
/// (`"8760h"`, `leasehold::MAX_TTL`) for `ttl`, `at_least`, `max_hold` and
/// `every`, 3650 days (`"87600h"`, `leasehold::MAX_WAIT`) for `wait`.
///
/// ## `ttl = "10s"`
///
/// How long the lease lasts. Without `renew`, a body that runs longer than the ttl
/// loses the lock: the body is dropped at its next `.await` and the call returns
/// the `Lost` failure. Default `"30s"`.
///
/// ```
/// use leasehold::{distributed_lock, LockError, LostCause};
///
/// #[distributed_lock(key = "slow", ttl = "100ms", client = leasehold::LockClient::in_memory())]
/// async fn slow() -> Result<&'static str, LockError> {
///     tokio::time::sleep(std::time::Duration::from_secs(5)).await;
///     Ok("never reached")
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let lost = LockError::Lost { key: "slow".into(), cause: LostCause::Expired };
/// assert_eq!(slow().await, Err(lost));
/// # }
/// ```
///
/// ## `renew`
///
/// Keep the lease alive while the body runs: a watchdog extends it every ttl/3.
/// If a renewal is refused (the key was deleted or taken over), the lock is lost:
/// the body is dropped at its next `.await` and the call returns the `Lost` failure.
/// `renew = true` is an error: the flag takes no value.
///
/// ## `wait = "2s"`
///
/// How long to wait for a busy lock. Waiters are woken by the release, not by
/// polling. Without `wait`, the lock is tried once: a busy lock fails at once
/// (skip if locked).
///
/// ```
/// use std::time::Duration;
/// use leasehold::{distributed_lock, LockClient, LockError};
///
/// #[distributed_lock(key = "ledger", wait = "50ms")]
/// async fn post() -> Result<(), LockError> { Ok(()) }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// leasehold::set_global_client(LockClient::in_memory());
/// let other = LockClient::in_memory();
/// let held = other.lock("ledger").ttl(Duration::from_secs(60)).acquire().await?;
/// assert_eq!(post().await, Err(LockError::Busy { key: "ledger".into() }));
/// held.release().await?;
/// assert_eq!(post().await, Ok(()));
/// # Ok(()) }
/// ```
///
/// ## `at_least = "30s"`
///
/// Keep the key at least this long after the start, even if the body finishes
/// sooner: for jobs that several instances start at the same moment, a fast run
/// on one instance must not let a slower instance run the job again. For jobs on
/// a timer, [`every`](#every--1m) is usually what you want: it holds the key
/// until the end of the period instead of for a fixed time.
///
/// ```
/// use leasehold::{distributed_lock, LockClient};
///
/// #[distributed_lock(key = "report", ttl = "5m", at_least = "30s")]
/// async fn nightly_report() -> Option<&'static str> { Some("done") }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// leasehold::set_global_client(LockClient::in_memory());
/// assert_eq!(nightly_report().await, Some("done"));
/// // Finished, but the key stays 30 s: a late instance skips.
/// assert_eq!(nightly_report().await, None);
/// # }
/// ```
///
/// ## `max_hold = "10m"`
///
/// With `renew`: stop renewing this long after the lock was taken. The lease then
/// runs out, and the body is dropped at its next `.await` with
/// `LockError::Lost { cause: LostCause::MaxHold, .. }`: a bound on how long a
/// renewed job may keep a lock (a stuck job cannot hold it forever). It calls
/// `LockRequest::max_hold`. Without `renew` it is a compile error (the lease
/// already ends after `ttl`).
///
/// ```
/// use leasehold::{distributed_lock, LockClient, LockError};
///
/// #[distributed_lock(key = "import", ttl = "30s", renew, max_hold = "10m")]
/// async fn import() -> Result<usize, LockError> { Ok(3) }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// leasehold::set_global_client(LockClient::in_memory());
/// assert_eq!(import().await, Ok(3));
/// # }
/// ```
///
/// ## `permits = 5`, `read` / `write`, `keys = [...]`
///
/// The lock family: `permits = N` takes one permit of the counting semaphore
/// `key` (`LockClient::semaphore`), `read` and `write` a side of the
/// read-write lock `key` (`LockClient::rw_lock`), and `keys` every named lock
/// at once, or none (`LockClient::lock_all`: sorted, so two calls naming the
/// same keys in opposite orders never deadlock). Combinations that make no
/// sense are compile errors at the offending option: `read` with `write`,
/// `permits` with `read` or `write`, `keys` with `key`, `permits`, `read` or
/// `write`, and `permits = 0`.
///
/// ```
/// use leasehold::{distributed_lock, LockClient, LockError};
///
/// #[distributed_lock(key = "partner-api", permits = 5, renew)]
/// async fn call_partner() -> Result<(), LockError> { Ok(()) }
///
/// #[distributed_lock(keys = ["acct:<from>", "acct:<to>"], wait = "2s")]
/// async fn transfer(from: u64, to: u64, cents: u64) -> Result<u64, LockError> { Ok(cents) }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// leasehold::set_global_client(LockClient::in_memory());
/// assert_eq!(call_partner().await, Ok(()));
/// assert_eq!(transfer(2, 1, 500).await, Ok(500));
/// # }
/// ```
///
/// ## `every = "1m"`
///
/// Run a job **once per period across processes**. With a fixed key, instances
/// whose timers fire at different moments in a period run the job more than once:
/// an instance that fires after the first run released the lock finds it free.
/// With `every`, the key names the wall-clock slot of the call (`<key>:<slot>`,
/// the slot's start in unix seconds, or where the key says `<slot>`) and the lock
/// is kept until the slot ends, even when the body finished sooner. Each
/// instance computes the same slot from its clock; the first to fire in the slot
/// runs the job, the others skip. Inside the body,
/// `leasehold::schedule::current_slot()` says which slot it runs for.
///
/// `every` is a whole number of seconds. It cannot be combined with `at_least`
/// (it sets it) nor `wait` (a waiting instance would run the slot again). Machines
/// need synchronized clocks (NTP). A run that lasts longer than its slot overlaps
/// the next slot's run. To make the timers themselves fire on the slot
/// boundaries, use `leasehold::schedule::aligned_interval`.
///
/// ```
/// use std::time::Duration;
/// use leasehold::{distributed_lock, LockClient, schedule};
///
/// #[distributed_lock(key = "digest:<region>", every = "1h")]
/// async fn hourly_digest(region: &str) -> Option<u64> {
///     // Keyed "digest:eu:<start of this hour in unix seconds>".
///     schedule::current_slot().map(|slot| slot.id())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// leasehold::set_global_client(LockClient::in_memory());
/// let first = hourly_digest("eu").await;
/// assert!(matches!(first, Some(start) if start % 3600 == 0), "the first call of the hour runs");
/// let slot = first.unwrap_or_default();
/// // Any later call in the same hour, from any instance, skips.
/// if schedule::Slot::now(Duration::from_secs(3600)).id() == slot {
///     assert_eq!(hourly_digest("eu").await, None);
/// }
///
/// // A job loop: tick on the hour, run once per hour across instances.
/// let mut hours = schedule::aligned_interval(Duration::from_secs(3600));
/// # let _ = &mut hours;
/// # if false {
/// loop {
///     hours.tick().await;
///     hourly_digest("eu").await;
/// }
/// # }
/// # }
/// ```
///
/// ## `cron = "0 0 3 * * *"`
///
/// Run a job **once per fire of a cron schedule across processes**, whatever
/// calls it on each instance (tokio-cron-scheduler, apalis-cron, a timer).
/// The key names the schedule's latest fire at or before the call
/// (`<key>:<fire time in unix seconds>`, or where the key says `<slot>`), and
/// the lock is kept until the next fire, even when the body finished sooner:
/// the first instance to call for a fire runs the job, the others skip.
/// Instances whose clocks differ by less than the gap between fires agree on
/// the key. Inside the body, `leasehold::schedule::current_slot()` is the
/// span from the fire to the next one.
///
/// The expression has six fields, **seconds first** as in
/// tokio-cron-scheduler (`sec min hour day-of-month month day-of-week`, an
/// optional seventh for the year), in UTC: `"0 0 3 * * *"` is 03:00:00
/// every day, `"0 */15 * * * MON-FRI"` every quarter hour on weekdays,
/// `"*/2 * * * * *"` every two seconds. It is read by the `croner` crate,
/// the one tokio-cron-scheduler uses, with the same settings, so a string
/// means the same schedule in both (weekdays from Sunday = 0, `L`, `W`, `#`,
/// `@daily`). A bad expression, or one that never fires (`"0 0 0 30 2 *"`),
/// is a compile error at the string. `cron` cannot be combined with
/// `every`, `wait` (a waiting instance would run the fire again) or
/// `at_least` (it sets it).
///
/// Call at or after the fire time: a call a moment before it (a timer that
/// fires early by its own clock) belongs to the previous fire.
///
/// ```
/// use leasehold::{distributed_lock, LockClient, LockError, schedule};
///
/// #[distributed_lock(key = "nightly-export", cron = "0 0 3 * * *", ttl = "1m", renew)]
/// async fn nightly_export() -> Result<u64, LockError> {
///     // Keyed "nightly-export:<today's 03:00 UTC in unix seconds>".
///     Ok(schedule::current_slot().map_or(0, |slot| slot.id()))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// leasehold::set_global_client(LockClient::in_memory());
/// let fired = nightly_export().await?; // the first call for the fire runs
/// assert_eq!(fired % 86_400, 3 * 3600);
/// // Any later call before tomorrow's 03:00, from any instance, skips.
/// let cron = schedule::Cron::parse("0 0 3 * * *")?;
/// if cron.slot_now().map(|slot| slot.id()) == Ok(fired) {
///     assert!(matches!(nightly_export().await, Err(LockError::Busy { .. })));
/// }
/// # Ok(()) }
/// ```
///
/// ## `client = expr`
///
/// The `LockClient` to use, instead of the global one set by
/// `leasehold::set_global_client`. The expression is evaluated once per call, before
/// the body; it may use the parameters and `self`, and may be a `LockClient`, a
/// `&LockClient`, or anything that dereferences to one (`Arc<LockClient>`):
///
/// ```
/// use leasehold::{distributed_lock, LockClient, LockError};
///
/// struct Orders { locks: LockClient }
///
/// impl Orders {
///     #[distributed_lock(key = "order:<id>", wait = "2s", client = self.locks.clone())]
///     async fn pay(&self, id: u64) -> Result<u64, LockError> {
///         // The fencing token of the lock this body runs under, for the storage layer.
///         assert!(leasehold::fencing_token().is_some());
///         Ok(id * 100)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let orders = Orders { locks: LockClient::in_memory() };
/// assert_eq!(orders.pay(7).await, Ok(700));
/// # }
/// ```
///
/// Without `client` and without a global client, each call fails with
/// `LockError::NoGlobalClient` (see below); it never panics.
///
/// ## `crate = "path"`
///
/// The path to the `leasehold` crate used in the generated code, for crates that
/// rename it or re-export it: `crate = "::my_runtime::leasehold"`.
///
/// # When the lock is not held
///
/// If the lock cannot be taken (busy after `wait`, Redis unreachable, no global
/// client, ...) or is lost while the body runs, the function returns
/// `<ReturnType as leasehold::LockFallback>::from_lock_error(err)`:
///
/// - `Result<T, E>` where `E: From<LockError>`: `Err(err.into())`;
/// - `()`: the call is skipped;
/// - `Option<T>`: `None`.
///
/// For `()` and `Option`, the failure is logged through `tracing`. A busy lock is
/// the only quiet case (`debug`, the normal outcome of a skip-if-locked job);
/// a lease lost while the body ran (with its cause) and an unreachable backend are
/// logged at `WARN`; no global client, an invalid argument or a key of the wrong
/// type at `ERROR` (a missing global client also once per process). Without a
/// `tracing` subscriber nothing is printed, so **return `Result` from jobs whose
/// runs matter**: then every failure reaches the caller.
///
/// Any other return type is a compile error saying so.
///
/// ```
/// use leasehold::{distributed_lock, LockClient, LockError};
///
/// #[distributed_lock(key = "report")]
/// async fn report() {}
///
/// #[distributed_lock(key = "cache-warm:<region>", ttl = "1m30s")]
/// async fn warm_cache(region: &str) -> Option<usize> { Some(region.len()) }
///
/// #[distributed_lock(key = "invoice")]
/// async fn invoice() -> Result<(), LockError> { Ok(()) }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // No global client yet: nothing runs, and Result says why.
/// assert_eq!(invoice().await, Err(LockError::NoGlobalClient));
/// report().await;                            // skipped, logged at ERROR
/// assert_eq!(warm_cache("eu").await, None);  // the same
///
/// leasehold::set_global_client(LockClient::in_memory());
/// assert_eq!(invoice().await, Ok(()));
/// assert_eq!(warm_cache("eu").await, Some(2));
/// # }
/// ```
///
/// # What may be annotated
///
/// `async fn` only: free functions, methods taking `&self`, `&mut self` or `self`,
/// generic functions, functions with `impl Trait` parameters. The signature is
/// kept exactly as written; only the body is wrapped, and `return` and `?` in the
/// body behave as before. Every body shape compiles without a warning, one-line
/// bodies included. The returned future is `Send` when the body's is.
///
/// Calls nested in the same task that take the same key (through the same client)
/// re-enter the lock instead of deadlocking.
///
/// # Compile errors
///
/// Every mistake is reported at the offending token, all mistakes of one attribute
/// together: a non-`async` fn, an unknown or duplicate option, a missing `key`, a
/// bad, too short or too long duration, a placeholder naming no parameter (with
/// the names it could use), a `format!`-style `{id}` in a key, `renew` given a
/// value, `max_hold` without `renew`, `every` with `wait` or `at_least`, a bad
/// `cron` expression, `cron` with `every`, `wait` or `at_least`, an
/// unsupported return type. A placeholder's field that does not exist
/// (`<order.idd>`) is rustc's error, at the key. Only these errors are shown: the
/// function is then left as written, without warnings about parameters that only
/// the key uses.
#[proc_macro_attribute]
pub fn distributed_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(attr.into(), item.into()).into()
}

/// Runs an `async fn` only while this instance leads an election: one
/// instance of a service runs the scheduler, the others skip until they take
/// over.
///
/// ```
/// use leasehold::{leader_only, LockClient};
///
/// #[leader_only(election = "scheduler", ttl = "10s")]
/// async fn tick() -> Option<u64> {
///     // Runs on the leader only; the term fences its writes.
///     leasehold::fencing_token()
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// leasehold::set_global_client(LockClient::in_memory());
/// // Alone in the election: the first call joins it, is elected at once and runs.
/// assert!(tick().await.is_some());
/// # }
/// ```
///
/// The first call joins the election in the background: from then on, the
/// client campaigns for it for the rest of its life (one campaign per client
/// and election name, whatever the number of functions or calls), leading
/// when elected and standing in line otherwise. A call waits only for that
/// campaign's first attempt; then it runs the body if this instance leads
/// now, and otherwise returns at once with
/// `<ReturnType as leasehold::LockFallback>::from_lock_error(LockError::Busy { .. })`
/// (a quiet skip for `()`, `None` for `Option`, `Err` for `Result`). If the
/// leadership is lost while the body runs, the body is dropped at its next
/// await point and the function returns the `Lost` failure. Inside the body,
/// `leasehold::fencing_token()` is the term of the leadership.
///
/// # Options
///
/// | option | meaning | default |
/// | --- | --- | --- |
/// | `election = "…"` | **required**: the election's name (its own namespace: a lock of the same name is another thing) | — |
/// | `ttl = "10s"` | the leader's lease, renewed every ttl/3: a dead leader is replaced within it | `"30s"` |
/// | `client = expr` | the `LockClient` to use | the global client |
/// | `crate = "path"` | the path of the `leasehold` crate in generated code | `"::leasehold"` |
///
/// The `ttl` of the first call of a client and election is the one its
/// campaign keeps. Options of `#[distributed_lock]` that make no sense for
/// an election (`key`, `renew`, `wait`, `at_least`, `max_hold`, `every`,
/// `permits`, `read`, `write`) are compile errors at the option, and so are
/// a missing `election`, a bad duration and a non-async function.
#[proc_macro_attribute]
pub fn leader_only(attr: TokenStream, item: TokenStream) -> TokenStream {
    leader::expand(attr.into(), item.into()).into()
}
