//! leasehold's metrics on a Prometheus `/metrics` endpoint, with
//! `metrics-exporter-prometheus`, and a few workers that contend for one lock
//! so that every graph of the Grafana dashboard `docs/grafana/leasehold.json`
//! moves.
//!
//! ```text
//! cargo run -p leasehold-examples --example metrics_prometheus --features prometheus
//! curl localhost:9464/metrics
//! ```
//!
//! leasehold records through the `metrics` facade (feature `metrics`; names in
//! `leasehold::observability`) and installs no recorder: the service installs
//! one, here the Prometheus exporter's, and serves what it renders. Its
//! histograms (`leasehold_acquire_seconds`, `leasehold_wait_seconds`,
//! `leasehold_hold_seconds`) are given bucket bounds, so that they are
//! rendered as Prometheus histograms (`_bucket`, `_sum`, `_count`), which
//! `histogram_quantile` needs, rather than the exporter's default summaries.
//!
//! Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`); without a Redis it
//! says so and runs with the in-memory backend. Listens on `127.0.0.1:PORT`
//! (default 9464, the port Prometheus exporters usually take).

use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::routing::get;
use leasehold::LockClient;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// The bucket bounds, in seconds, of each of leasehold's histograms: from a
/// round trip to Redis to a lock that waits or is held for minutes.
pub const HISTOGRAM_BUCKETS: [(&str, &[f64]); 3] = [
    (
        "leasehold_acquire_seconds",
        &[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ],
    ),
    (
        "leasehold_wait_seconds",
        &[
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
        ],
    ),
    (
        "leasehold_hold_seconds",
        &[
            0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
        ],
    ),
];

/// The exporter's builder with [`HISTOGRAM_BUCKETS`]. Install it with
/// `install_recorder()` before the first lock is taken.
pub fn prometheus_builder() -> Result<PrometheusBuilder, BuildError> {
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in HISTOGRAM_BUCKETS {
        builder = builder.set_buckets_for_metric(Matcher::Full(name.to_owned()), buckets)?;
    }
    Ok(builder)
}

/// `GET /metrics`: the Prometheus text exposition format.
pub fn metrics_app(handle: PrometheusHandle) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let body = handle.render();
            async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body) }
        }),
    )
}

/// One worker of a job that several instances run: take `report`, work for
/// 120 ms, release, pause, again. Worker 0 skips when the lock is busy, the
/// others wait for it up to 300 ms, so the graphs show acquisitions, skips,
/// waits, waiters and hold times.
async fn worker(client: LockClient, id: u64) {
    let wait = Duration::from_millis(if id == 0 { 0 } else { 300 });
    loop {
        let _ = client
            .lock("report")
            .ttl(Duration::from_secs(5))
            .wait(wait)
            .run(tokio::time::sleep(Duration::from_millis(120)))
            .await;
        tokio::time::sleep(Duration::from_millis(150 + 70 * id)).await;
    }
}

async fn lock_client(url: &str) -> LockClient {
    let connected = LockClient::builder()
        .connect_timeout(Duration::from_millis(500))
        .connect(url)
        .await;
    match connected {
        Ok(client) => {
            println!("Using Redis at {url}.");
            client
        }
        Err(e) => {
            println!("No Redis answered at {url} ({e}): using the in-memory backend.");
            LockClient::in_memory()
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The recorder first: what is recorded before it is installed is lost.
    let handle = prometheus_builder()?.install_recorder()?;
    // Without the exporter's own HTTP listener, its upkeep (draining the
    // histograms' samples into their buckets) is the service's to run.
    tokio::spawn({
        let handle = handle.clone();
        async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                handle.run_upkeep();
            }
        }
    });

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let client = lock_client(&url).await;
    for id in 0..3 {
        tokio::spawn(worker(client.clone(), id));
    }

    let port = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9464_u16);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!(
        "Serving http://{}/metrics; import docs/grafana/leasehold.json into Grafana.",
        listener.local_addr()?
    );
    axum::serve(listener, metrics_app(handle))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
