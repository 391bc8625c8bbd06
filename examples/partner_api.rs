//! A capped partner API behind an HTTP route: at most 3 calls in flight at
//! once, across every instance of the service, with a semaphore layer
//! (`leasehold::tower::LockLayer::semaphore`, feature `tower`).
//!
//! ```text
//! cargo run -p leasehold-examples --example partner_api --features web            # 12 requests at once
//! PORT=3002 cargo run -p leasehold-examples --example partner_api --features web  # serve; curl localhost:3002/quote/7
//! ```
//!
//! `GET /quote/{sku}` asks the partner for a price. Before the handler runs,
//! the layer takes one of the 3 permits of `partner-api`, waiting in line
//! (first come, first served) up to 5 s; still none: **409**. Redis down:
//! **503**. The handler finds the permit's fencing token in the request
//! (`Fence`). A crashed instance's permits come back when their leases run
//! out; the watchdog keeps the lease of a slow call alive.
//!
//! Without `PORT`, the example sends twelve requests at once to two
//! instances of the router (two lock clients, as on two machines) and
//! prints how many calls were in flight at most. Redis at `REDIS_URL`
//! (default `redis://127.0.0.1:6379`); without one it says so and runs in
//! memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::Request;
use axum::routing::get;
use leasehold::LockClient;
use leasehold::tower::{Fence, LockLayer};
use tower::ServiceExt;

/// How many calls the partner allows at once.
const PERMITS: u32 = 3;

/// Calls in flight now, and the most seen at once.
#[derive(Default)]
struct Partner {
    in_flight: AtomicUsize,
    most: AtomicUsize,
}

async fn quote(
    State(partner): State<Arc<Partner>>,
    Path(sku): Path<u64>,
    Extension(Fence(token)): Extension<Fence>,
) -> String {
    let now = partner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    partner.most.fetch_max(now, Ordering::SeqCst);
    // The partner's answer takes a moment.
    tokio::time::sleep(Duration::from_millis(50)).await;
    partner.in_flight.fetch_sub(1, Ordering::SeqCst);
    format!("sku {sku}: 12.50 EUR (permit token {token})\n")
}

/// The routes of one instance.
fn app(locks: LockClient, partner: Arc<Partner>) -> Router {
    Router::new()
        .route("/quote/{sku}", get(quote))
        .layer(
            LockLayer::semaphore(locks, "partner-api", PERMITS)
                .ttl(Duration::from_secs(10))
                .renew(true)
                .wait(Duration::from_secs(5)),
        )
        .with_state(partner)
}

async fn lock_client(url: &str) -> LockClient {
    match LockClient::connect(url).await {
        Ok(client) => client,
        Err(error) => {
            println!("no Redis at {url} ({error}); running in memory");
            LockClient::in_memory()
        }
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let partner = Arc::new(Partner::default());

    if let Some(port) = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
    {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        println!("Listening on http://{}", listener.local_addr()?);
        return axum::serve(listener, app(lock_client(&url).await, partner))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await;
    }

    let instances = [
        app(lock_client(&url).await, partner.clone()),
        app(lock_client(&url).await, partner.clone()),
    ];
    let requests: Vec<_> = (0..12u64)
        .map(|sku| {
            let instance = instances[sku as usize % 2].clone();
            tokio::spawn(async move {
                let request = Request::get(format!("/quote/{sku}")).body(Body::empty());
                let response = match request {
                    Ok(request) => instance.oneshot(request).await,
                    Err(error) => return format!("sku {sku}: {error}\n"),
                };
                let response = response.unwrap_or_else(|never| match never {});
                let status = response.status();
                match axum::body::to_bytes(response.into_body(), 1 << 16).await {
                    Ok(body) if status.is_success() => String::from_utf8_lossy(&body).into_owned(),
                    _ => format!("sku {sku}: {status}\n"),
                }
            })
        })
        .collect();
    for request in requests {
        match request.await {
            Ok(line) => print!("{line}"),
            Err(join) => println!("a request panicked: {join}"),
        }
    }
    println!(
        "at most {} calls were in flight at once (cap {PERMITS})",
        partner.most.load(Ordering::SeqCst)
    );
    Ok(())
}
