//! What leasehold reports while it works: `tracing` spans and events, and
//! metrics (feature `metrics`). Documentation only; the names below are
//! public contract.
//!
//! leasehold emits through the [`tracing`](https://docs.rs/tracing) facade
//! and never installs a subscriber: install the one your service uses
//! (`tracing-subscriber`, OpenTelemetry...). Every span and event has a
//! target under `leasehold_core` (a `leasehold=debug` or
//! `leasehold_core=debug` directive of `tracing-subscriber`'s `EnvFilter`
//! selects them all). With no subscriber listening, or one that does not
//! want DEBUG from leasehold, a span costs one level check and its fields
//! are never computed.
//!
//! # Spans (level DEBUG)
//!
//! | span | fields | when |
//! | --- | --- | --- |
//! | `leasehold.acquire` | `key`, `wait_ms` (wait allowed), `ttl_ms`, `attempts` (attempts sent), `waited_ms` (from the first busy reply to the end), `fencing_token` (when acquired), `outcome` | every `acquire`, `try_acquire`, `run`, and `#[distributed_lock]` call |
//! | `leasehold.release` | `key`, `fencing_token`, `outcome` | every release that reaches the backend: `LockGuard::release`, the background release of a dropped guard, the end of `run` |
//! | `leasehold.renew` | `size` (leases in the batch), `audit` (`none`, or the cause of the server change that triggered a check of every lease: `restarted`, `failed_over`), `renewed`, `refused`, `outcome` | every renewal batch of a client's watchdog |
//!
//! `outcome` of `leasehold.acquire`: `acquired`, `reentered` (the task
//! already held it: no round trip), `busy`, `error`, `cancelled` (the
//! caller dropped the future). Of `leasehold.release`: `released`, or the
//! error kind (below), such as `not_held`. Of `leasehold.renew`: `done`
//! (the call succeeded, whatever each lease's answer) or `error` (the call
//! failed and is retried).
//!
//! Backend calls made inside a span (the attempts, the release, the
//! renewal) run inside it, so their own DEBUG events (a broken connection
//! resent, a retried release) nest under it.
//!
//! # Events
//!
//! | level | message | fields | when |
//! | --- | --- | --- | --- |
//! | WARN | `leasehold: lease lost: <cause>` | `key`, `fencing_token`, `cause` | a held lease is lost, whatever the cause (once per lease) |
//! | WARN | `leasehold: renewal refused` | `key`, `cause` (`refused`), `wrong_type` | the server refused a watchdog renewal (the key expired, was deleted, or is someone else's) |
//! | WARN | `leasehold: lease not found after a server change` | `key`, `cause` (`restarted`, `failed_over`), `wrong_type` | the check after a server change found the lease gone |
//! | WARN | `leasehold: renewal failed, retrying` | `error`, `leases` | a renewal call failed (unreachable, timeout); retried until the validity ends |
//! | WARN | `leasehold: the server restarted (its run_id changed); …` | `server` | a server restarted: its leases are checked, and nothing is granted there for the longest lease |
//! | WARN | `leasehold: the server may evict lock keys …` | `server`, `policy` | connected to a server whose `maxmemory-policy` can evict, with `allow_eviction(true)` |
//! | ERROR | `leasehold: the server now evicts keys; refusing to grant locks there` | `server`, `policy` | a server's policy changed to one that can evict, without `allow_eviction(true)` |
//! | WARN | `leasehold: lease lost while the body ran; the body was stopped` | `error` | a `run` body (or `#[distributed_lock]` function) was dropped |
//! | DEBUG | `leasehold: lock busy` | `key`, `attempts`, `waited_ms` | an acquisition gave up: the lock stayed busy |
//! | DEBUG | `leasehold: lock handed off after waiting` | `key`, `attempts`, `waited_ms`, `fencing_token` | an acquisition that found the lock busy got it after all (released to it, or expired) |
//!
//! Field values are stable snake_case names: `cause` is one of `refused`,
//! `expired`, `unreachable`, `restarted`, `failed_over`, `force_released`,
//! `max_hold` ([`LostCause`](crate::LostCause)); error kinds are `lost`,
//! `not_held`, `invalid_argument`, `no_global_client`, `wrong_type`,
//! `backend`, `unavailable`, `misconfigured`, `replica_sync`, `quorum`
//! ([`LockError`](crate::LockError)).
//!
//! # Metrics (feature `metrics`)
//!
//! Recorded through the [`metrics`](https://docs.rs/metrics) facade crate;
//! install the exporter you use (Prometheus, StatsD...). With the feature
//! off, nothing is compiled in; with it on and no recorder installed, each
//! recording is a call into the facade's no-op recorder.
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | `leasehold_acquired_total` | counter | `kind` | acquisitions that won the lock from the backend (re-entries are not counted) |
//! | `leasehold_busy_total` | counter | `kind` | acquisitions that gave up because the lock stayed busy (`Busy`, `try_acquire` returning `None`) |
//! | `leasehold_lost_total` | counter | `kind`, `cause` | leases lost while held |
//! | `leasehold_renewal_failures_total` | counter | `kind` | watchdog renewals of a lease that did not succeed: refused by the server, or a failed call (counted per lease in the batch, per try) |
//! | `leasehold_released_total` | counter | `kind` | releases confirmed by the backend |
//! | `leasehold_errors_total` | counter | `kind` (of the error) | errors returned by `acquire` (busy excepted), `release` and `extend`, by kind |
//! | `leasehold_acquire_seconds` | histogram | `kind` | duration of acquisitions that won the lock, waiting included |
//! | `leasehold_wait_seconds` | histogram | `kind` | time spent waiting for a busy lock: from the first busy reply to the lock won, or given up (only acquisitions that waited) |
//! | `leasehold_hold_seconds` | histogram | `kind` | how long a lease was held: from acquisition to release or loss |
//! | `leasehold_leases_held` | gauge | `kind` | leases held now by this process |
//! | `leasehold_waiters` | gauge | `kind` | acquisitions of this process waiting for a busy lock now |
//!
//! **The `kind` label** of every metric but `leasehold_errors_total` names
//! the member of the lock family: `lock` (`LockClient::lock`), `semaphore`
//! (a permit of `LockClient::semaphore`), `read` and `write` (the sides of
//! `LockClient::rw_lock`), `all` (`LockClient::lock_all`, one series
//! point per acquisition whatever the number of its keys) and `election`
//! (the leadership of `LockClient::election`: `leasehold_acquired_total`
//! counts the terms started, `leasehold_lost_total` the leaderships lost).
//! Sum over it for every lease of the process; six values at most, so it
//! never multiplies series much. `leasehold_errors_total` keeps `kind` for the error's kind
//! (below): its errors are not split by the lock's kind.
//!
//! **The `key` label.** Only a client built with
//! `LockClientBuilder::metrics_key_label(true)` adds a `key` label (the
//! lock's key, without prefix) to every metric it records. Each distinct
//! key then becomes a time series of its own in every metric: keep it for a
//! small, fixed set of keys (job names), never for keys built from ids.
//!
//! ## A dashboard
//!
//! - acquisitions per second: `rate(leasehold_acquired_total)`;
//! - contention: `rate(leasehold_busy_total) / (rate(leasehold_acquired_total) + rate(leasehold_busy_total))`;
//! - leases lost, by cause: `rate(leasehold_lost_total)` by `cause` (alert on any `refused`, `unreachable` or `restarted`);
//! - renewal trouble: `rate(leasehold_renewal_failures_total)` (alert when above zero for minutes);
//! - errors by kind: `rate(leasehold_errors_total)` by `kind` (`backend`, `quorum`: Redis trouble);
//! - acquisitions per primitive: `rate(leasehold_acquired_total)` by `kind` (`lock`, `semaphore`, `read`, `write`, `all`, `election`);
//! - terms started and leaderships lost: `leasehold_acquired_total{kind="election"}`, `leasehold_lost_total{kind="election"}` by `cause`;
//! - acquire latency p50 / p99: `leasehold_acquire_seconds`;
//! - time spent waiting p99: `leasehold_wait_seconds`;
//! - hold time p50 / p99 / max: `leasehold_hold_seconds` (a job's duration, as held);
//! - now: `leasehold_leases_held`, `leasehold_waiters`.
