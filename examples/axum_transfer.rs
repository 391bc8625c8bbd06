//! A transfer between two accounts over HTTP, guarded by both accounts'
//! locks at once: `#[distributed_lock(keys = [...])]` on the handler's work.
//!
//! `POST /transfer/{from}/{to}/{cents}` locks `acct:<from>` and `acct:<to>`
//! together, all or nothing. The keys are sorted before they are taken, so a
//! transfer from 1 to 2 and one from 2 to 1 at the same moment never
//! deadlock: one waits (up to 2 s) for the other. They are ordinary lock
//! keys, so code that locks one account (`lock("acct:1")`) waits for a
//! transfer that holds it, and the other way round. Busy: **409**; Redis
//! unreachable: **503**.
//!
//! ```text
//! cargo run -p leasehold-examples --example axum_transfer --features web
//! curl -X POST localhost:3001/transfer/1/2/500 & curl -X POST localhost:3001/transfer/2/1/300
//! ```
//!
//! On Redis Cluster the two keys usually live in different slots: they are
//! then taken one by one in sorted order and given back if one is busy (see
//! docs/recipes.md).
//! Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`); without one it
//! says so and runs in memory. Listens on `127.0.0.1:PORT` (default 3001).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use leasehold::{LockClient, LockError, distributed_lock};
use serde::Serialize;

/// The balances, in cents (here in memory; in a real service, rows written
/// with the transfer's fencing tokens).
struct Bank {
    locks: LockClient,
    balances: Mutex<HashMap<u64, i64>>,
}

#[derive(Serialize)]
struct Done {
    from: u64,
    to: u64,
    cents: i64,
    balances: (i64, i64),
}

/// Why a transfer did not happen.
#[derive(Debug)]
enum TransferError {
    Lock(LockError),
    SameAccount,
}

impl From<LockError> for TransferError {
    fn from(e: LockError) -> Self {
        TransferError::Lock(e)
    }
}

impl IntoResponse for TransferError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            TransferError::SameAccount => (
                StatusCode::BAD_REQUEST,
                "from and to are the same account".to_owned(),
            ),
            TransferError::Lock(e) if e.is_busy() => (StatusCode::CONFLICT, e.to_string()),
            TransferError::Lock(e) if e.is_unavailable() => {
                (StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            }
            TransferError::Lock(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        (status, Json(serde_json::json!({ "error": message }))).into_response()
    }
}

impl Bank {
    /// Both accounts locked, all or nothing, whatever order they come in.
    #[distributed_lock(keys = ["acct:<from>", "acct:<to>"], wait = "2s", client = self.locks.clone())]
    async fn transfer(&self, from: u64, to: u64, cents: i64) -> Result<Done, TransferError> {
        let mut balances = self.balances.lock().unwrap_or_else(PoisonError::into_inner);
        *balances.entry(from).or_insert(10_000) -= cents;
        *balances.entry(to).or_insert(10_000) += cents;
        Ok(Done {
            from,
            to,
            cents,
            balances: (balances[&from], balances[&to]),
        })
    }
}

async fn transfer(
    State(bank): State<Arc<Bank>>,
    Path((from, to, cents)): Path<(u64, u64, i64)>,
) -> Result<Json<Done>, TransferError> {
    if from == to {
        return Err(TransferError::SameAccount);
    }
    Ok(Json(bank.transfer(from, to, cents).await?))
}

fn app(bank: Arc<Bank>) -> Router {
    Router::new()
        .route("/transfer/{from}/{to}/{cents}", post(transfer))
        .with_state(bank)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3001);
    let locks = match LockClient::connect(&url).await {
        Ok(client) => client,
        Err(error) => {
            println!("no Redis at {url} ({error}); running in memory");
            LockClient::in_memory()
        }
    };
    let bank = Arc::new(Bank {
        locks,
        balances: Mutex::new(HashMap::new()),
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!(
        "Listening on http://{}: try `curl -X POST localhost:{port}/transfer/1/2/500`.",
        listener.local_addr()?
    );
    axum::serve(listener, app(bank))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
