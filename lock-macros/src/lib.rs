//! The `#[distributed_lock]` attribute of [leasehold](https://docs.rs/leasehold).
//!
//! Use it through the facade, as `leasehold::distributed_lock`: the generated code
//! refers to the `leasehold` crate.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod attr;
mod duration;
mod expand;
mod template;

use proc_macro::TokenStream;

/// Runs an `async fn` only while it holds a distributed lock.
///
/// ```ignore
/// use leasehold::distributed_lock;
///
/// #[distributed_lock(key = "draw:<date>", ttl = "10s", renew)]
/// async fn draw_winners(date: NaiveDate) -> Result<Vec<UserId>, AppError> {
///     // runs on one instance at a time for a given date
/// }
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
/// | `key = "…"` | **required**: the name of the lock, a [template](#key-templates) | — |
/// | `ttl = "10s"` | lease length ([duration](#durations)) | `"30s"` |
/// | `renew` | keep the lease alive while the body runs (a bare flag) | off |
/// | `wait = "2s"` | wait this long for a busy lock before giving up | one try (skip if locked) |
/// | `at_least = "30s"` | keep the key this long after the start, even if the body finishes sooner | off |
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
/// - `<<` and `>>` are a literal `<` and `>`;
/// - `}` is not allowed in a key (leasehold wraps keys in a Redis Cluster hash tag).
///
/// ```ignore
/// #[distributed_lock(key = "order:<order.id>")]
/// async fn pay(order: &Order) -> Result<Receipt, PayError> { /* ... */ }
///
/// impl Shard {
///     #[distributed_lock(key = "shard:<self.id>:compact")]
///     async fn compact(&self) { /* ... */ }
/// }
/// ```
///
/// Placeholders are checked at compile time: each must name a parameter of the
/// function (a plain `name: Type` parameter, not a pattern such as `(a, b): (u8, u8)`)
/// or `self`. The key is rendered when the function is called, before the body
/// runs (so before the body takes ownership of the arguments). A key without
/// placeholders is passed as is, without `format!`.
///
/// ## Durations
///
/// `ttl`, `wait` and `at_least` take a string: a number followed by a unit,
/// `ms`, `s`, `m` (minutes) or `h`, or a combination from the largest unit down,
/// as in `"500ms"`, `"10s"`, `"5m"`, `"1m30s"`, `"1h2m3s500ms"`. Durations are
/// checked at compile time: no whitespace, no fractions, no other units (`"1d"`,
/// and `"10M"` is not months), greater than zero and at most 7 days.
///
/// ## `ttl = "10s"`
///
/// How long the lease lasts. Without `renew`, a body that runs longer than the ttl
/// loses the lock: the body is dropped at its next `.await` and the call returns
/// the `Lost` failure. Default `"30s"`.
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
/// ## `at_least = "30s"`
///
/// Keep the key at least this long after the start, even if the body finishes
/// sooner: for jobs that several instances start at the same moment, a fast run
/// on one instance must not let a slower instance run the job again.
///
/// ```ignore
/// #[distributed_lock(key = "report", ttl = "5m", at_least = "30s")]
/// async fn nightly_report() { /* ... */ }
/// ```
///
/// ## `client = expr`
///
/// The `LockClient` to use, instead of the global one set by
/// `leasehold::set_global_client`. The expression is evaluated once per call, before
/// the body; it may use the parameters and `self`, and may be a `LockClient`, a
/// `&LockClient`, or anything that dereferences to one (`Arc<LockClient>`):
///
/// ```ignore
/// struct Orders { locks: LockClient }
///
/// impl Orders {
///     #[distributed_lock(key = "order:<id>", wait = "2s", client = self.locks.clone())]
///     async fn pay(&self, id: u64) -> Result<(), PayError> { /* ... */ }
/// }
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
/// - `()`: the call is skipped (the failure is logged through `tracing`);
/// - `Result<T, E>` where `E: From<LockError>`: `Err(err.into())`;
/// - `Option<T>`: `None`.
///
/// Any other return type is a compile error saying so.
///
/// # What may be annotated
///
/// `async fn` only: free functions, methods taking `&self`, `&mut self` or `self`,
/// generic functions, functions with `impl Trait` parameters. The signature is
/// kept exactly as written; only the body is wrapped, and `return` and `?` in the
/// body behave as before. The returned future is `Send` when the body's is.
///
/// Calls nested in the same task that take the same key (through the same client)
/// re-enter the lock instead of deadlocking.
///
/// # Compile errors
///
/// Every mistake is reported at the offending token, all mistakes of one attribute
/// together: a non-`async` fn, an unknown or duplicate option, a missing `key`, a
/// bad duration, a placeholder naming no parameter, `renew` given a value, an
/// unsupported return type.
#[proc_macro_attribute]
pub fn distributed_lock(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(attr.into(), item.into()).into()
}
