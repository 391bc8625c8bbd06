//! `LockLayer` in front of axum's `Router` and of a plain
//! `tower::service_fn`, every request sent with `ServiceExt::oneshot`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{Request, Response, StatusCode, header};
use axum::routing::{get, post};
use leasehold::LockClient;
use leasehold::tower::{Fence, LockLayer};
use tokio::sync::mpsc;
use tower::{Layer, Service, ServiceExt};

use crate::support::{RedisServer, free_port};

/// Nothing here may hang: every request is answered within this.
const LIMIT: Duration = Duration::from_secs(30);

pub(crate) async fn client(server: &RedisServer) -> LockClient {
    LockClient::builder()
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .connect(&server.url())
        .await
        .expect("connect")
}

/// A client whose server never answers: nothing listens on its port.
pub(crate) async fn unreachable_client() -> LockClient {
    LockClient::builder()
        .lazy(true)
        .connect(&format!("redis://127.0.0.1:{}", free_port()))
        .await
        .expect("a lazy client starts without its server")
}

/// `/orders/<id>/...` locks `order:<id>`; any other path is not locked.
fn order_key(req: &Request<Body>) -> Option<String> {
    let rest = req.uri().path().strip_prefix("/orders/")?;
    let id = rest.split('/').next()?;
    Some(format!("order:{id}"))
}

fn post_to(path: &str) -> Request<Body> {
    Request::post(path).body(Body::empty()).expect("a request")
}

async fn send(app: &Router, path: &str) -> (StatusCode, String) {
    let response = tokio::time::timeout(LIMIT, app.clone().oneshot(post_to(path)))
        .await
        .unwrap_or_else(|_| panic!("POST {path}: no answer within {LIMIT:?}"))
        .unwrap_or_else(|never| match never {});
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("the body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// What the handlers saw: how many ran at once, per key and overall, and
/// the fencing tokens in the order the handlers started.
#[derive(Default)]
struct Tracker {
    hold: Duration,
    calls: AtomicUsize,
    running: Mutex<HashMap<String, usize>>,
    most_per_key: AtomicUsize,
    overall: AtomicUsize,
    most_overall: AtomicUsize,
    fences: Mutex<HashMap<String, Vec<u64>>>,
}

impl Tracker {
    fn new(hold: Duration) -> Arc<Tracker> {
        Arc::new(Tracker {
            hold,
            ..Tracker::default()
        })
    }

    async fn work(&self, key: &str, fence: u64) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        {
            let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            let now = running.entry(key.to_owned()).or_default();
            *now += 1;
            self.most_per_key.fetch_max(*now, Ordering::SeqCst);
            self.fences
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(key.to_owned())
                .or_default()
                .push(fence);
        }
        let overall = self.overall.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_overall.fetch_max(overall, Ordering::SeqCst);
        tokio::time::sleep(self.hold).await;
        self.overall.fetch_sub(1, Ordering::SeqCst);
        *self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_owned())
            .or_default() -= 1;
    }

    fn fences(&self) -> HashMap<String, Vec<u64>> {
        self.fences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

async fn pay(
    State(tracker): State<Arc<Tracker>>,
    Path(id): Path<u64>,
    Extension(Fence(fence)): Extension<Fence>,
) -> String {
    tracker.work(&format!("order:{id}"), fence).await;
    format!("paid {id} under {fence}")
}

async fn quote(
    State(tracker): State<Arc<Tracker>>,
    Extension(Fence(fence)): Extension<Fence>,
) -> String {
    tracker.work("partner-api", fence).await;
    format!("quoted under {fence}")
}

async fn health(State(tracker): State<Arc<Tracker>>) -> &'static str {
    tracker.calls.fetch_add(1, Ordering::SeqCst);
    "ok"
}

/// The order service of one instance: each order paid by one request at a
/// time, `/health` not locked.
fn orders(client: LockClient, tracker: Arc<Tracker>) -> Router {
    Router::new()
        .route("/orders/{id}/pay", post(pay))
        .route("/health", post(health))
        .layer(
            LockLayer::new(client, order_key)
                .ttl(Duration::from_secs(5))
                .renew(true)
                .wait(Duration::from_secs(20)),
        )
        .with_state(tracker)
}

fn assert_increasing(fences: &HashMap<String, Vec<u64>>) {
    for (key, fences) in fences {
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "{key}: fencing tokens not increasing in the order the handlers ran: {fences:?}"
        );
    }
}

/// Two instances (two clients, two routers) and many concurrent requests
/// on three orders: never two handlers of one order at once, every request
/// served, each order's fencing tokens increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn axum_runs_one_request_per_key_at_a_time() {
    let server = RedisServer::start();
    let tracker = Tracker::new(Duration::from_millis(15));
    let instances = [
        orders(client(&server).await, tracker.clone()),
        orders(client(&server).await, tracker.clone()),
    ];
    let requests: Vec<_> = (0..48)
        .map(|n| {
            let app = instances[n % 2].clone();
            tokio::spawn(async move { send(&app, &format!("/orders/{}/pay", n % 3)).await })
        })
        .collect();
    for request in requests {
        let (status, body) = request.await.expect("the request task");
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert_eq!(tracker.calls.load(Ordering::SeqCst), 48);
    assert_eq!(
        tracker.most_per_key.load(Ordering::SeqCst),
        1,
        "two requests of one order ran at once"
    );
    assert!(
        tracker.most_overall.load(Ordering::SeqCst) >= 2,
        "different orders never ran at once: the layer serialised everything"
    );
    let fences = tracker.fences();
    assert_eq!(fences.len(), 3);
    assert!(fences.values().all(|f| f.len() == 16), "{fences:?}");
    assert_increasing(&fences);
}

/// Busy with no wait: 409 at once, the handler is not called; once the
/// other holder releases, the same request goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_key_answers_409() {
    let server = RedisServer::start();
    let tracker = Tracker::new(Duration::ZERO);
    let app = Router::new()
        .route("/orders/{id}/pay", post(pay))
        .layer(LockLayer::new(client(&server).await, order_key))
        .with_state(tracker.clone());
    let other = client(&server).await;
    let held = other
        .lock("order:7")
        .acquire()
        .await
        .expect("held elsewhere");

    let (status, body) = send(&app, "/orders/7/pay").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.is_empty(), "{body}");
    assert_eq!(tracker.calls.load(Ordering::SeqCst), 0, "the handler ran");
    // Another order is not held.
    assert_eq!(send(&app, "/orders/8/pay").await.0, StatusCode::OK);

    held.release().await.expect("release");
    let (status, body) = send(&app, "/orders/7/pay").await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A request whose key function says `None` never touches Redis: with a
/// server nobody can reach, `/health` is served and a locked path is 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_key_passes_through_unlocked() {
    let tracker = Tracker::new(Duration::ZERO);
    let app = Router::new()
        .route("/orders/{id}/pay", post(pay))
        .route("/health", post(health))
        .layer(LockLayer::new(unreachable_client().await, order_key))
        .with_state(tracker.clone());
    let (status, body) = send(&app, "/health").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    assert_eq!(tracker.calls.load(Ordering::SeqCst), 1);

    let (status, _) = send(&app, "/orders/1/pay").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(tracker.calls.load(Ordering::SeqCst), 1, "the handler ran");
}

/// The lease is taken away while the handler works (an operator's
/// `force_release`): the handler is dropped and the request answered 503,
/// within the renewal period; the lock is free afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_mid_request_answers_503() {
    #[derive(Clone)]
    struct Slow {
        entered: mpsc::UnboundedSender<u64>,
        finished: Arc<AtomicBool>,
    }
    async fn slow(
        State(slow): State<Slow>,
        Extension(Fence(fence)): Extension<Fence>,
    ) -> &'static str {
        let _ = slow.entered.send(fence);
        tokio::time::sleep(Duration::from_secs(60)).await;
        slow.finished.store(true, Ordering::SeqCst);
        "finished"
    }

    let server = RedisServer::start();
    let (entered, mut entries) = mpsc::unbounded_channel();
    let finished = Arc::new(AtomicBool::new(false));
    let app = Router::new()
        .route("/orders/{id}/pay", post(slow))
        .layer(
            LockLayer::new(client(&server).await, order_key)
                .ttl(Duration::from_millis(900))
                .renew(true),
        )
        .with_state(Slow {
            entered,
            finished: finished.clone(),
        });
    let request = tokio::spawn(async move { send(&app, "/orders/9/pay").await });
    let fence = tokio::time::timeout(LIMIT, entries.recv())
        .await
        .expect("the handler started")
        .expect("a fence");

    let operator = client(&server).await;
    let info = operator.inspect("order:9").await.expect("inspect");
    assert_eq!(info.map(|i| i.fencing_token), Some(fence));
    assert!(
        operator
            .force_release("order:9")
            .await
            .expect("force release")
    );

    let started = tokio::time::Instant::now();
    let (status, body) = request.await.expect("the request task");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        started.elapsed() < Duration::from_millis(900) + Duration::from_secs(1),
        "the loss was noticed only after {:?}",
        started.elapsed()
    );
    assert!(
        !finished.load(Ordering::SeqCst),
        "the handler ran to its end"
    );
    let again = operator.lock("order:9").try_acquire().await.expect("try");
    assert!(again.is_some(), "the lock was left held");
}

/// A semaphore layer on two instances: never more than its permits at
/// once, every request served in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_layer_never_lets_more_than_its_permits_in() {
    let server = RedisServer::start();
    let tracker = Tracker::new(Duration::from_millis(20));
    let mut instances = Vec::new();
    for _ in 0..2 {
        instances.push(
            Router::new()
                .route("/quote", get(quote).post(quote))
                .layer(
                    LockLayer::semaphore(client(&server).await, "partner-api", 3)
                        .ttl(Duration::from_secs(5))
                        .renew(true)
                        .wait(Duration::from_secs(20)),
                )
                .with_state(tracker.clone()),
        );
    }
    let requests: Vec<_> = (0..30)
        .map(|n| {
            let app = instances[n % 2].clone();
            tokio::spawn(async move { send(&app, "/quote").await })
        })
        .collect();
    for request in requests {
        let (status, body) = request.await.expect("the request task");
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert_eq!(tracker.calls.load(Ordering::SeqCst), 30);
    let most = tracker.most_per_key.load(Ordering::SeqCst);
    assert!(
        most <= 3,
        "{most} requests held a permit at once (3 permits)"
    );
    assert!(
        most >= 2,
        "the permits were never shared: at most {most} at once"
    );
}

// ---- a plain `tower::service_fn` over `http::Request<String>` ----

fn text(path: &str) -> Request<String> {
    Request::post(path).body(String::new()).expect("a request")
}

/// Calls of a `service_fn` that answers the request's fence, if any; 500
/// when `leasehold::fencing_token()` (the lock the task holds, as inside
/// `LockRequest::run`) says otherwise.
fn echo_fence(
    calls: Arc<AtomicUsize>,
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    tower::service_fn(move |req: Request<String>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let fence = req.extensions().get::<Fence>().map(|f| f.0);
        let held = leasehold::fencing_token();
        async move {
            let mut response = Response::new(match fence {
                Some(fence) => fence.to_string(),
                None => "no fence".to_owned(),
            });
            if held != fence {
                *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            }
            Ok::<_, Infallible>(response)
        }
    })
}

/// The path is the key.
fn path_key(req: &Request<String>) -> Option<String> {
    Some(format!("job:{}", req.uri().path()))
}

async fn call<S>(service: &S, path: &str) -> Response<String>
where
    S: Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone,
{
    tokio::time::timeout(LIMIT, service.clone().oneshot(text(path)))
        .await
        .unwrap_or_else(|_| panic!("{path}: no answer within {LIMIT:?}"))
        .unwrap_or_else(|never| match never {})
}

/// The handler finds the lock's fencing token in `Fence`: the same number
/// `acquire` gives, increasing from one request to the next, also across
/// other holders of the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_fn_finds_increasing_fencing_tokens() {
    let server = RedisServer::start();
    let calls = Arc::new(AtomicUsize::new(0));
    let service = LockLayer::new(client(&server).await, path_key).layer(echo_fence(calls.clone()));
    let other = client(&server).await;
    let mut fences = Vec::new();
    for round in 0..4 {
        let response = call(&service, "/report").await;
        assert_eq!(response.status(), StatusCode::OK);
        let fence: u64 = response.body().parse().expect("a fence in the body");
        fences.push(fence);
        if round == 1 {
            let guard = other.lock("job:/report").acquire().await.expect("acquire");
            fences.push(guard.fencing_token());
            guard.release().await.expect("release");
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

/// Redis unreachable: 503, without `Retry-After` (nobody knows when), and
/// the service is not called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_answers_503() {
    let calls = Arc::new(AtomicUsize::new(0));
    let service = LockLayer::new(unreachable_client().await, path_key)
        .wait(Duration::from_millis(200))
        .layer(echo_fence(calls.clone()));
    let response = call(&service, "/report").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().get(header::RETRY_AFTER).is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// After a restart, a key this client asked for within its lease may still
/// be held unseen: 503 with `Retry-After` in whole seconds (at most the
/// lease, rounded up), while a fresh key is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_503_says_when_to_retry() {
    let mut server = RedisServer::start();
    let calls = Arc::new(AtomicUsize::new(0));
    let service = LockLayer::new(client(&server).await, path_key)
        .ttl(Duration::from_secs(10))
        .layer(echo_fence(calls.clone()));
    let other = client(&server).await;
    let _held = other
        .lock("job:/held")
        .acquire()
        .await
        .expect("held elsewhere");
    assert_eq!(call(&service, "/held").await.status(), StatusCode::CONFLICT);

    server.restart();
    let mut fresh = call(&service, "/fresh").await;
    for _ in 0..50 {
        if fresh.status() == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        fresh = call(&service, "/fresh").await;
    }
    assert_eq!(fresh.status(), StatusCode::OK, "{fresh:?}");

    let refused = call(&service, "/held").await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry_after = refused
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    assert!(
        retry_after.is_some_and(|secs| (1..=10).contains(&secs)),
        "Retry-After: {:?}",
        refused.headers().get(header::RETRY_AFTER)
    );
}

/// A setup mistake (a wrong password) and a key leasehold refuses both
/// answer 500, without calling the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misconfiguration_answers_500() {
    let server = RedisServer::start_with(&["--requirepass", "right-pw"]);
    let wrong = LockClient::builder()
        .lazy(true)
        .connect(&format!("redis://:wrong-pw@127.0.0.1:{}", server.port()))
        .await
        .expect("a lazy client starts");
    // The background connection meets the refusal first.
    let mut seen = None;
    for _ in 0..100 {
        match wrong.lock("probe").try_acquire().await {
            Err(error) if error.is_misconfigured() => {
                seen = Some(error);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert!(seen.is_some(), "the wrong password was never reported");
    let calls = Arc::new(AtomicUsize::new(0));
    let service = LockLayer::new(wrong, path_key).layer(echo_fence(calls.clone()));
    let response = call(&service, "/report").await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);

    let right = LockClient::connect(&format!("redis://:right-pw@127.0.0.1:{}", server.port()))
        .await
        .expect("connect");
    let bad_key = LockLayer::new(right, |_: &Request<String>| Some("not}a-key".to_owned()))
        .layer(echo_fence(calls.clone()));
    assert_eq!(
        call(&bad_key, "/report").await.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

// ---- backpressure ----

/// A service that is ready only once `open` is set, and that answers 500
/// when called without a `poll_ready` that said ready (as a buffer or a
/// concurrency limit would fail).
struct Gated {
    open: Arc<AtomicBool>,
    waker: Arc<Mutex<Option<Waker>>>,
    polled_ready: bool,
}

impl Clone for Gated {
    fn clone(&self) -> Self {
        Gated {
            open: self.open.clone(),
            waker: self.waker.clone(),
            // Readiness is not cloned.
            polled_ready: false,
        }
    }
}

impl Service<Request<String>> for Gated {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.open.load(Ordering::SeqCst) {
            self.polled_ready = true;
            return Poll::Ready(Ok(()));
        }
        *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        Poll::Pending
    }

    fn call(&mut self, req: Request<String>) -> Self::Future {
        let mut response = Response::new(format!("{:?}", req.extensions().get::<Fence>()));
        if !std::mem::take(&mut self.polled_ready) {
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        }
        std::future::ready(Ok(response))
    }
}

/// An inner service that is not ready makes the layer not ready; once it
/// is, the request goes to the very service that said ready (locked or
/// not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inner_services_backpressure_is_kept() {
    let server = RedisServer::start();
    let open = Arc::new(AtomicBool::new(false));
    let waker = Arc::new(Mutex::new(None::<Waker>));
    let gated = Gated {
        open: open.clone(),
        waker: waker.clone(),
        polled_ready: false,
    };
    let mut service = LockLayer::new(client(&server).await, |req: &Request<String>| {
        (req.uri().path() != "/free").then(|| "gated".to_owned())
    })
    .layer(gated);

    let not_ready = tokio::time::timeout(Duration::from_millis(200), service.ready()).await;
    assert!(
        not_ready.is_err(),
        "the layer was ready before its inner service"
    );

    open.store(true, Ordering::SeqCst);
    if let Some(waker) = waker.lock().unwrap_or_else(PoisonError::into_inner).take() {
        waker.wake();
    }
    for path in ["/locked", "/free", "/locked"] {
        let ready = tokio::time::timeout(LIMIT, service.ready())
            .await
            .expect("ready once the inner service is")
            .unwrap_or_else(|never| match never {});
        let response = ready
            .call(text(path))
            .await
            .unwrap_or_else(|never| match never {});
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{path}: the inner service was called without being ready"
        );
        let fenced = response.body().starts_with("Some(Fence(");
        assert_eq!(fenced, path == "/locked", "{path}: {}", response.body());
    }
}
