//! The README recipe: an axum handler annotated directly, its key naming what
//! an extractor binds (`Path(id)`), its client taken from the state.
#![deny(warnings)]

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use leasehold::{LockClient, LockError, distributed_lock};

#[derive(Clone)]
struct App {
    locks: LockClient,
}

enum ApiError {
    Lock(LockError),
}

impl From<LockError> for ApiError {
    fn from(e: LockError) -> Self {
        ApiError::Lock(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let ApiError::Lock(err) = self;
        let status = if err.is_busy() {
            StatusCode::CONFLICT
        } else if err.is_misconfigured() {
            StatusCode::INTERNAL_SERVER_ERROR
        } else if err.is_unavailable() {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        let mut response = (status, err.to_string()).into_response();
        if let Some(after) = err.retry_after() {
            let secs = after.as_secs() + 1;
            response.headers_mut().insert(header::RETRY_AFTER, secs.into());
        }
        response
    }
}

#[distributed_lock(key = "refund:<id>", ttl = "10s", renew, client = app.locks.clone())]
async fn refund(State(app): State<App>, Path(id): Path<u64>) -> Result<Json<u64>, ApiError> {
    Ok(Json(id))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let app = App {
        locks: LockClient::in_memory(),
    };
    let _router: Router = Router::new()
        .route("/orders/{id}/refund", post(refund))
        .with_state(app.clone());

    let held = LockClient::in_memory().lock("refund:9").acquire().await.unwrap();
    let busy = refund(State(app.clone()), Path(9)).await.err().map(IntoResponse::into_response);
    assert_eq!(busy.map(|r| r.status()), Some(StatusCode::CONFLICT));
    held.release().await.unwrap();
    let Ok(Json(id)) = refund(State(app), Path(9)).await else {
        panic!("the refund should run once the lock is free");
    };
    assert_eq!(id, 9);
}
