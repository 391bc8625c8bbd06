//! S10 tower layer: an axum handler behind `leasehold::tower::LockLayer`
//! against the same handler taking the same lock by hand in its body,
//! requests sent through the router with `ServiceExt::oneshot` (no socket)
//! by 64 tasks, each request on a fresh key. What the layer costs beyond
//! the lock: requests/s, latency, and heap allocations per request.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use leasehold::LockClient;
use leasehold::tower::{Fence, LockLayer};
use tower::ServiceExt;

use super::{Ctx, TTL};
use crate::adapters::{Kind, Res};
use crate::report::{Record, Row, Value};
use crate::stats::{Samples, allocations, rate};

/// How the handler's lock is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `LockLayer::new` in front of the route.
    Layer,
    /// `client.lock(key).acquire()` and `release()` in the handler.
    ByHand,
}

impl Variant {
    pub const ALL: [Variant; 2] = [Variant::Layer, Variant::ByHand];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Layer => "leasehold layer",
            Variant::ByHand => "leasehold by hand",
        }
    }
}

const TASKS: usize = 64;

pub async fn s10(ctx: &Ctx, variant: Variant, rep: usize) -> Row {
    let scenario = "S10 tower layer";
    match run(ctx, scenario, variant, rep).await {
        Ok(record) => Row::Ok(record),
        Err(e) => Row::failed(scenario, variant.name(), e),
    }
}

/// `/orders/<id>/pay` locks `order:<id>`.
fn order_key(req: &Request<Body>) -> Option<String> {
    let id = req
        .uri()
        .path()
        .strip_prefix("/orders/")?
        .split('/')
        .next()?;
    Some(format!("order:{id}"))
}

async fn behind_layer(Path(id): Path<String>, Extension(Fence(fence)): Extension<Fence>) -> String {
    std::hint::black_box((id, fence));
    String::new()
}

async fn by_hand(State(client): State<LockClient>, Path(id): Path<String>) -> (StatusCode, String) {
    let guard = match client.lock(format!("order:{id}")).ttl(TTL).acquire().await {
        Ok(guard) => guard,
        Err(e) if e.is_busy() => return (StatusCode::CONFLICT, String::new()),
        Err(e) if e.is_unavailable() => return (StatusCode::SERVICE_UNAVAILABLE, String::new()),
        Err(_) => return (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
    };
    std::hint::black_box((id, guard.fencing_token()));
    match guard.release().await {
        Ok(()) => (StatusCode::OK, String::new()),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
    }
}

fn router(client: LockClient, variant: Variant) -> Router {
    match variant {
        Variant::Layer => Router::new()
            .route("/orders/{id}/pay", post(behind_layer))
            .layer(LockLayer::new(client, order_key).ttl(TTL)),
        Variant::ByHand => Router::new()
            .route("/orders/{id}/pay", post(by_hand))
            .with_state(client),
    }
}

async fn run(ctx: &Ctx, scenario: &str, variant: Variant, rep: usize) -> Res<Record> {
    let client = LockClient::builder()
        .prefix(format!("{}:", ctx.prefix("S10", Kind::Leasehold, rep)))
        .connect(&ctx.url())
        .await?;
    let app = router(client, variant);
    let tag = match variant {
        Variant::Layer => "l",
        Variant::ByHand => "h",
    };
    requests(&app, ctx.knobs.warmup, &format!("{tag}w")).await?;
    let allocated = allocations();
    let (count, elapsed, mut samples) = requests(&app, ctx.knobs.pairs_window, tag).await?;
    let allocated = allocations().saturating_sub(allocated);
    Ok(Record::new(
        scenario,
        variant.name(),
        rate(count, elapsed),
        samples.p50_us(),
        samples.p99_us(),
    )
    .with("tasks", Value::I(TASKS as i64))
    .with(
        "allocs_per_request",
        Value::F(allocated as f64 / count.max(1) as f64),
    ))
}

/// `TASKS` tasks sending requests on fresh keys for `window`: how many,
/// in how long, and each one's latency.
async fn requests(app: &Router, window: Duration, tag: &str) -> Res<(u64, Duration, Samples)> {
    let start = Instant::now();
    let deadline = start + window;
    let handles: Vec<_> = (0..TASKS)
        .map(|t| {
            let app = app.clone();
            let prefix = format!("/orders/{tag}{t}x");
            tokio::spawn(async move {
                let mut samples = Samples::with_capacity(4096);
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let request = Request::post(format!("{prefix}{n}/pay")).body(Body::empty())?;
                    let t0 = Instant::now();
                    let response = app.clone().oneshot(request).await?;
                    samples.push(t0.elapsed());
                    if response.status() != StatusCode::OK {
                        return Err(format!("a request answered {}", response.status()).into());
                    }
                    n += 1;
                }
                Res::Ok((n, samples))
            })
        })
        .collect();
    let mut count = 0;
    let mut all = Samples::with_capacity(TASKS * 4096);
    for handle in handles {
        let (n, samples) = handle.await??;
        count += n;
        all.extend(samples);
    }
    Ok((count, start.elapsed(), all))
}
