//! An HTTP service where paying an order is guarded by a distributed lock.
//!
//! `POST /orders/{id}/pay` calls `Payments::pay(id)`, annotated with
//! `#[distributed_lock(key = "order:<id>", ...)]`. Run the service on several
//! machines behind a load balancer, and two requests paying the same order
//! at the same moment can no longer both see "unpaid" and charge twice: one
//! pays, the other answers **409 Conflict** at once. A Redis outage answers
//! **503 Service Unavailable**; a setup mistake (a wrong password, say)
//! **500 Internal Server Error**. Errors are JSON: `{"error": "...", "key": "order:42"}`.
//!
//! ```text
//! cargo run -p leasehold-examples --example axum_orders --features web
//! curl -X POST localhost:3000/orders/42/pay & curl -X POST localhost:3000/orders/42/pay
//! ```
//!
//! Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`); without a Redis it
//! says so and runs with the in-memory backend. Listens on `127.0.0.1:PORT`
//! (default 3000). A payment takes `PAYMENT_MS` milliseconds (default 300), so
//! that concurrent requests are easy to produce by hand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use leasehold::{LockClient, LockError, distributed_lock};
use serde::Serialize;

/// What a successful payment returns.
#[derive(Debug, Clone, Serialize)]
struct Receipt {
    order: u64,
    /// `"paid"` by this request, or `"already_paid"` by an earlier one.
    status: &'static str,
    amount_cents: u64,
    /// The fencing token of the lock under which the order was paid: a
    /// ledger would refuse a write carrying an older one.
    fencing_token: u64,
}

/// Why a payment did not go through.
#[derive(Debug)]
enum PayError {
    /// Taking or keeping the order's lock failed (busy, Redis down, lost).
    Lock(LockError),
}

/// Required by `#[distributed_lock]` on a function returning
/// `Result<_, PayError>`: how a lock failure becomes this error.
impl From<LockError> for PayError {
    fn from(e: LockError) -> Self {
        PayError::Lock(e)
    }
}

#[derive(Serialize)]
struct ErrorBody {
    error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    /// When to try again, in whole seconds (also the `Retry-After` header):
    /// set while the lock cannot be granted after a Redis restart.
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after: Option<u64>,
}

impl IntoResponse for PayError {
    fn into_response(self) -> Response {
        let PayError::Lock(err) = self;
        let key = err.key().map(str::to_owned);
        let (status, error) = if err.is_busy() {
            (
                StatusCode::CONFLICT,
                "this order is being paid by another request".to_owned(),
            )
        } else if err.is_misconfigured() {
            // A wrong password, an unknown database, an untrusted
            // certificate...: no retry helps, the setup must be fixed.
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the lock service is misconfigured: {err}"),
            )
        } else if err.is_unavailable() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the lock service is unavailable, retry later: {err}"),
            )
        } else if err.is_lost() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the order's lock was lost during the payment, retry later".to_owned(),
            )
        } else {
            (StatusCode::INTERNAL_SERVER_ERROR, err.to_string())
        };
        // After a Redis restart or failover, a lock that may still be held
        // unseen is refused for a while: the error says how long.
        let retry_after = err.retry_after().map(|d| d.as_secs() + 1);
        let mut response = (
            status,
            Json(ErrorBody {
                error,
                key,
                retry_after,
            }),
        )
            .into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// The payment service of one instance. Public, with [`app`], so that the
/// tests (tests/user_kit.rs) drive the same service with leasehold's fault kit.
pub struct Payments {
    locks: LockClient,
    payment_time: Duration,
    /// Stands in for the orders table of a database.
    paid: Mutex<HashMap<u64, Receipt>>,
}

impl Payments {
    /// The service, taking its locks through `locks`; a payment takes
    /// `payment_time`.
    pub fn new(locks: LockClient, payment_time: Duration) -> Payments {
        Payments {
            locks,
            payment_time,
            paid: Mutex::default(),
        }
    }

    /// Pay order `id`, once. The check ("already paid?") and the act (charge,
    /// record) run under the order's lock, on one request of one instance
    /// at a time; a concurrent request gets `Err(PayError::Lock(Busy))`.
    #[distributed_lock(key = "order:<id>", ttl = "10s", renew, client = self.locks.clone())]
    async fn pay(&self, id: u64) -> Result<Receipt, PayError> {
        if let Some(receipt) = self.orders().get(&id) {
            return Ok(Receipt {
                status: "already_paid",
                ..receipt.clone()
            });
        }
        // Talking to the payment provider takes a moment; the watchdog keeps
        // the lease alive meanwhile.
        tokio::time::sleep(self.payment_time).await;
        let receipt = Receipt {
            order: id,
            status: "paid",
            amount_cents: 1_000 + id % 100 * 25,
            fencing_token: leasehold::fencing_token().unwrap_or(0),
        };
        self.orders().insert(id, receipt.clone());
        Ok(receipt)
    }

    fn orders(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Receipt>> {
        self.paid.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn pay(
    State(payments): State<Arc<Payments>>,
    Path(id): Path<u64>,
) -> Result<Json<Receipt>, PayError> {
    let outcome = payments.pay(id).await;
    match &outcome {
        Ok(receipt) => println!("order {id}: {}", receipt.status),
        Err(PayError::Lock(e)) => println!("order {id}: {e}"),
    }
    outcome.map(Json)
}

/// The HTTP routes.
pub fn app(payments: Arc<Payments>) -> Router {
    Router::new()
        .route("/orders/{id}/pay", post(pay))
        .with_state(payments)
}

async fn lock_client(url: &str) -> LockClient {
    let connected = LockClient::builder()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .connect(url)
        .await;
    match connected {
        Ok(client) => {
            println!("Using Redis at {url}.");
            client
        }
        Err(e) => {
            println!("No Redis answered at {url} ({e}).");
            println!(
                "Notice: running with leasehold's in-memory backend instead (one process, same semantics)."
            );
            LockClient::in_memory()
        }
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text.parse().unwrap_or_else(|_| {
            eprintln!("{name}={text:?} is not a number, using {default}");
            default
        }),
        Err(_) => default,
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let port = u16::try_from(env_number("PORT", 3000)).unwrap_or(3000);
    let payments = Arc::new(Payments::new(
        lock_client(&url).await,
        Duration::from_millis(env_number("PAYMENT_MS", 300)),
    ));

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!(
        "Listening on http://{}: try `curl -X POST localhost:{port}/orders/42/pay` twice at once.",
        listener.local_addr()?
    );
    axum::serve(listener, app(payments))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
