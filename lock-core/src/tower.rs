//! A [tower](https://docs.rs/tower) layer that takes a lock (or one permit
//! of a semaphore) for each HTTP request: "one request per order at a
//! time", or "at most 5 calls to the partner at once across all
//! instances", on a route of axum, tonic or any service over
//! [`http::Request`] (feature `tower`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::time::Duration;
//! use leasehold::LockClient;
//! use leasehold::tower::{Fence, LockLayer};
//!
//! let client = LockClient::in_memory();
//! // One request per order at a time: `/orders/42/pay` locks `order:42/pay`.
//! let per_order = LockLayer::new(client.clone(), |req: &http::Request<String>| {
//!     let rest = req.uri().path().strip_prefix("/orders/")?;
//!     Some(format!("order:{rest}")) // None: the request is not locked
//! })
//! .ttl(Duration::from_secs(10))
//! .renew(true)
//! .wait(Duration::from_secs(2));
//! // At most 5 requests at once, across every instance.
//! let partner = LockLayer::semaphore(client, "partner-api", 5);
//! # let _ = (per_order, partner);
//! # }
//! ```
//!
//! With axum: `Router::new().route(...).layer(per_order)`; with tonic:
//! `Server::builder().layer(per_order)`. docs/frameworks.md in the
//! repository has both, compiled.
//!
//! # What the inner service sees and what the client gets
//!
//! The key function sees the request before the inner service does;
//! `None` passes the request through without a lock (and without a word
//! to Redis). Otherwise the lock is taken first, its fencing token is put
//! in the request's extensions as [`Fence`], and the lock is held until the
//! inner service's response future completes (a streamed body may still be
//! sent after that). Inside the inner service, [`crate::fencing_token`] and
//! re-entry work as inside [`LockRequest::run`](crate::LockRequest::run).
//!
//! Refusals become responses, with an empty body, and the inner service is
//! not called:
//!
//! | the lock | status |
//! | --- | --- |
//! | busy after `wait` | `409 Conflict` |
//! | unavailable ([`LockError::is_unavailable`]) | `503 Service Unavailable`, with `Retry-After` (whole seconds, rounded up) when [`LockError::retry_after`] knows it |
//! | misconfigured, or any other error | `500 Internal Server Error` |
//! | lost while the inner future runs | the inner future is dropped; `503 Service Unavailable` |
//!
//! A gRPC call (`content-type: application/grpc…`, as tonic sends) is
//! answered in gRPC's own terms instead, so that its client sees a status
//! code rather than an HTTP error: `ABORTED` for busy (the code of HTTP
//! 409), `UNAVAILABLE` for unavailable and for a lost lease (the code
//! clients retry; `grpc-retry-pushback-ms` when the wait is known),
//! `INTERNAL` for anything else, each with a `grpc-message`.
//!
//! Errors of the inner service pass through unchanged.
//!
//! # Backpressure
//!
//! `poll_ready` is the inner service's. `call` takes the inner service that
//! was polled ready into the response future and leaves a clone in its
//! place (the usual pattern of tower middleware that call the inner
//! service later), so the inner service must be `Clone`, as axum's routes
//! and tonic's services are. While the lock is awaited, the readiness the
//! inner service granted (a slot of a concurrency limit, say) stays taken.
//!
//! # Cost per request
//!
//! Besides what the lock itself takes (the key, the guard, its one round
//! trip to acquire and one to release): a request passed through
//! unlocked allocates nothing; a locked one boxes its response future once,
//! because the acquisition is an `async fn` whose future cannot be named.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Request, Response, StatusCode, header};
use tower_layer::Layer;
use tower_service::Service;

use crate::client::LockClient;
use crate::error::LockError;
use crate::reentrancy;
use crate::request::LockRequest;

/// The fencing token of the lock a [`LockLayer`] took for this request, in
/// the request's extensions: pass it to storage that rejects stale writers.
///
/// With axum, take it as an extractor argument,
/// `Extension(Fence(token)): Extension<Fence>`; with tonic,
/// `request.extensions().get::<Fence>()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(pub u64);

/// The settings of each request's lock, as [`LockRequest`] has them.
#[derive(Debug, Clone, Copy, Default)]
struct Options {
    ttl: Option<Duration>,
    renew: bool,
    wait: Duration,
    max_hold: Option<Duration>,
}

impl Options {
    fn apply(self, mut request: LockRequest) -> LockRequest {
        if let Some(ttl) = self.ttl {
            request = request.ttl(ttl);
        }
        if let Some(max) = self.max_hold {
            request = request.max_hold(max);
        }
        request.renew(self.renew).wait(self.wait)
    }
}

/// A [`tower_layer::Layer`] that takes a lock per request: see the
/// [module documentation](self).
///
/// `K` is the key function ([`LockLayer::new`]) or a semaphore's fixed key
/// ([`LockLayer::semaphore`]).
#[derive(Clone)]
pub struct LockLayer<K> {
    client: LockClient,
    key: K,
    options: Options,
}

impl<K> LockLayer<K> {
    /// A layer that locks, for each request, the key `key_fn` gives for
    /// it: `Fn(&http::Request<B>) -> Option<String>`, where `None` lets
    /// the request through unlocked. The key is a lock key as
    /// [`LockClient::lock`] takes it (the client's prefix is added).
    pub fn new(client: LockClient, key_fn: K) -> LockLayer<K> {
        LockLayer {
            client,
            key: key_fn,
            options: Options::default(),
        }
    }

    /// The lease of each request's lock (default: the client's default
    /// TTL). See [`LockRequest::ttl`].
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = Some(ttl);
        self
    }

    /// Renew the lease while the inner service works (default `false`).
    /// See [`LockRequest::renew`].
    pub fn renew(mut self, on: bool) -> Self {
        self.options.renew = on;
        self
    }

    /// How long a request waits for a busy lock before it is answered 409
    /// (default zero: one try). See [`LockRequest::wait`].
    pub fn wait(mut self, max: Duration) -> Self {
        self.options.wait = max;
        self
    }

    /// Stop renewing this long after acquisition: the inner future is then
    /// dropped and the request answered 503. See [`LockRequest::max_hold`].
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.options.max_hold = Some(max);
        self
    }
}

impl LockLayer<SemaphoreKey> {
    /// A layer that takes one of the `permits` permits of the semaphore
    /// `key` for each request: at most `permits` requests at once through
    /// every layer (on every instance) naming that key. See
    /// [`LockClient::semaphore`].
    pub fn semaphore(
        client: LockClient,
        key: impl Into<String>,
        permits: u32,
    ) -> LockLayer<SemaphoreKey> {
        LockLayer::new(
            client,
            SemaphoreKey {
                key: key.into(),
                permits,
            },
        )
    }
}

impl<K> std::fmt::Debug for LockLayer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockLayer")
            .field("client", &self.client)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<S, K: Clone> Layer<S> for LockLayer<K> {
    type Service = LockService<S, K>;

    fn layer(&self, inner: S) -> LockService<S, K> {
        LockService {
            inner,
            config: Arc::new(Config {
                client: self.client.clone(),
                key: self.key.clone(),
                options: self.options,
            }),
        }
    }
}

/// The fixed key of [`LockLayer::semaphore`].
#[derive(Debug, Clone)]
pub struct SemaphoreKey {
    key: String,
    permits: u32,
}

mod sealed {
    use crate::client::LockClient;
    use crate::request::LockRequest;

    /// What a [`super::LockLayer`] locks for one request, if anything.
    pub trait Sealed<B> {
        fn request(&self, client: &LockClient, req: &http::Request<B>) -> Option<LockRequest>;
    }
}

/// Where a [`LockLayer`] gets the key of a request of body `B`:
/// implemented for every `Fn(&http::Request<B>) -> Option<String>` and for
/// [`SemaphoreKey`]. Sealed.
pub trait RequestKey<B>: sealed::Sealed<B> {}

impl<B, T: sealed::Sealed<B>> RequestKey<B> for T {}

impl<B, F> sealed::Sealed<B> for F
where
    F: Fn(&Request<B>) -> Option<String>,
{
    fn request(&self, client: &LockClient, req: &Request<B>) -> Option<LockRequest> {
        self(req).map(|key| client.lock(key))
    }
}

impl<B> sealed::Sealed<B> for SemaphoreKey {
    fn request(&self, client: &LockClient, _req: &Request<B>) -> Option<LockRequest> {
        Some(client.semaphore(self.key.clone(), self.permits))
    }
}

/// What the services of one layer share.
struct Config<K> {
    client: LockClient,
    key: K,
    options: Options,
}

/// The service a [`LockLayer`] wraps around `S`: see the
/// [module documentation](self). Cheap to clone (the inner service's clone
/// and a reference count).
pub struct LockService<S, K> {
    inner: S,
    config: Arc<Config<K>>,
}

impl<S: Clone, K> Clone for LockService<S, K> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: std::fmt::Debug, K> std::fmt::Debug for LockService<S, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .field("client", &self.config.client)
            .field("options", &self.config.options)
            .finish_non_exhaustive()
    }
}

impl<S, K, B, ResBody> Service<Request<B>> for LockService<S, K>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    K: RequestKey<B>,
    B: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, Result<Response<ResBody>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let config = &self.config;
        let Some(lock) = config.key.request(&config.client, &req) else {
            return ResponseFuture {
                state: State::Passed {
                    inner: self.inner.call(req),
                },
            };
        };
        let lock = config.options.apply(lock);
        let protocol = Protocol::of(&req);
        // The service polled ready goes with the request; its clone stays
        // here for the next `poll_ready`.
        let fresh = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, fresh);
        ResponseFuture {
            state: State::Locked {
                locked: Box::pin(call_locked(lock, ready, req, protocol)),
            },
        }
    }
}

/// Take the lock, call `inner` holding it, release it once the response
/// is there; a refusal or a loss becomes a response.
async fn call_locked<S, B, ResBody>(
    lock: LockRequest,
    mut inner: S,
    mut req: Request<B>,
    protocol: Protocol,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    ResBody: Default,
{
    let guard = match lock.acquire().await {
        Ok(guard) => guard,
        Err(error) => return Ok(refusal(&error, protocol)),
    };
    req.extensions_mut().insert(Fence(guard.fencing_token()));
    let lease = guard.lease().clone();
    let outcome = reentrancy::holding(&lease, async {
        tokio::select! {
            biased;
            _ = lease.lost() => None,
            response = inner.call(req) => Some(response),
        }
    })
    .await;
    match outcome {
        Some(response) => {
            if let Err(error) = guard.release().await {
                tracing::warn!(%error, "leasehold: release after the request was answered failed");
            }
            response
        }
        None => {
            let error = lease.lost_error();
            tracing::warn!(%error, "leasehold: lease lost while the request ran; it was stopped");
            Ok(protocol.answer(Refusal::Unavailable, None))
        }
    }
}

/// The response to a request whose lock was not granted.
fn refusal<ResBody: Default>(error: &LockError, protocol: Protocol) -> Response<ResBody> {
    if error.is_busy() {
        return protocol.answer(Refusal::Busy, None);
    }
    if error.is_unavailable() {
        tracing::debug!(%error, "leasehold: lock unavailable, answering 503 / UNAVAILABLE");
        return protocol.answer(Refusal::Unavailable, error.retry_after());
    }
    tracing::warn!(%error, "leasehold: could not take the request's lock, answering 500 / INTERNAL");
    protocol.answer(Refusal::Failed, None)
}

/// Why a request is answered without calling the inner service.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    Busy,
    Unavailable,
    Failed,
}

/// How a refusal is said: an HTTP status, or for a gRPC call (a request
/// whose `content-type` is `application/grpc…`) a gRPC status in a
/// trailers-only response, which gRPC clients read as the call's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http,
    Grpc,
}

impl Protocol {
    fn of<B>(req: &Request<B>) -> Protocol {
        let grpc = req
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"));
        if grpc { Protocol::Grpc } else { Protocol::Http }
    }

    fn answer<ResBody: Default>(
        self,
        refusal: Refusal,
        retry_after: Option<Duration>,
    ) -> Response<ResBody> {
        let mut response = Response::new(ResBody::default());
        match self {
            Protocol::Http => {
                *response.status_mut() = match refusal {
                    Refusal::Busy => StatusCode::CONFLICT,
                    Refusal::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                    Refusal::Failed => StatusCode::INTERNAL_SERVER_ERROR,
                };
                if let Some(after) = retry_after {
                    let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                }
            }
            Protocol::Grpc => {
                // gRPC codes: ABORTED (10) is HTTP 409's, UNAVAILABLE (14)
                // is 503's and the one clients retry, INTERNAL (13) 500's.
                let (code, message) = match refusal {
                    Refusal::Busy => ("10", "the lock of this call is held elsewhere"),
                    Refusal::Unavailable => ("14", "the lock of this call is unavailable"),
                    Refusal::Failed => ("13", "the lock of this call could not be taken"),
                };
                let headers = response.headers_mut();
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/grpc"),
                );
                headers.insert("grpc-status", HeaderValue::from_static(code));
                headers.insert("grpc-message", HeaderValue::from_static(message));
                if let Some(after) = retry_after {
                    // The gRPC retry design's server pushback, in milliseconds.
                    let millis = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
                    headers.insert("grpc-retry-pushback-ms", HeaderValue::from(millis));
                }
            }
        }
        response
    }
}

/// A boxed, sendable future of the locked path.
type Locked<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pin_project_lite::pin_project! {
    /// The response future of [`LockService`]: the inner service's own
    /// future when the request passes unlocked, else one boxed future that
    /// acquires, calls the inner service and releases.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while the lock is awaited, the acquisition is
    /// abandoned as [`LockRequest::acquire`] describes (nothing is left
    /// behind) and the inner service is not called; dropped while the
    /// inner future runs, that future is dropped and the lock released in
    /// the background at once.
    pub struct ResponseFuture<F, T> {
        #[pin]
        state: State<F, T>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, T> {
        Passed { #[pin] inner: F },
        Locked { locked: Locked<T> },
    }
}

impl<F, T> Future for ResponseFuture<F, T>
where
    F: Future<Output = T>,
{
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.project().state.project() {
            StateProj::Passed { inner } => inner.poll(cx),
            StateProj::Locked { locked } => locked.as_mut().poll(cx),
        }
    }
}

impl<F, T> std::fmt::Debug for ResponseFuture<F, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Passed { .. } => "passed through",
            State::Locked { .. } => "locked",
        };
        f.debug_tuple("ResponseFuture").field(&state).finish()
    }
}
