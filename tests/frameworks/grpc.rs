//! `LockLayer` in front of a tonic service, called by tonic's own gRPC
//! client over the service in process (no socket): the call finds its
//! `Fence`, and each refusal reaches the client as a gRPC status code, not
//! as an HTTP error the client cannot read.
//!
//! The service is written by hand over `tonic::server::Grpc` with a codec
//! that passes bytes through, as generated code would be over protobuf
//! messages: no build step, no protobuf compiler.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut};
use leasehold::tower::{Fence, LockLayer};
use tokio::sync::mpsc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};
use tower::{Layer, Service};

use crate::layer::{client, unreachable_client};
use crate::support::RedisServer;

/// Every call is answered within this.
const LIMIT: Duration = Duration::from_secs(30);

/// Bytes in, bytes out.
#[derive(Debug, Clone, Copy, Default)]
struct Bytes;

impl Codec for Bytes {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Bytes;
    type Decoder = Bytes;

    fn encoder(&mut self) -> Bytes {
        Bytes
    }

    fn decoder(&mut self) -> Bytes {
        Bytes
    }
}

impl Encoder for Bytes {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Bytes {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let len = src.remaining();
        Ok(Some(src.copy_to_bytes(len).to_vec()))
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// `/orders.Orders/Pay`: answers with the fencing token it found, after an
/// optional pause (to be caught holding the lock).
#[derive(Clone)]
struct Orders {
    calls: Arc<AtomicUsize>,
    entered: Option<mpsc::UnboundedSender<u64>>,
    pause: Duration,
}

/// One unary method, as tonic's generated code would write it.
struct Pay(Orders);

impl tonic::server::UnaryService<Vec<u8>> for Pay {
    type Response = Vec<u8>;
    type Future = BoxFuture<Result<tonic::Response<Vec<u8>>, Status>>;

    fn call(&mut self, request: tonic::Request<Vec<u8>>) -> Self::Future {
        let orders = self.0.clone();
        Box::pin(async move {
            let Some(Fence(fence)) = request.extensions().get::<Fence>().copied() else {
                return Err(Status::internal("no fence in the call's extensions"));
            };
            orders.calls.fetch_add(1, Ordering::SeqCst);
            if let Some(entered) = &orders.entered {
                let _ = entered.send(fence);
            }
            tokio::time::sleep(orders.pause).await;
            Ok(tonic::Response::new(fence.to_string().into_bytes()))
        })
    }
}

impl Service<http::Request<tonic::body::Body>> for Orders {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let orders = self.clone();
        Box::pin(async move {
            if req.uri().path() != "/orders.Orders/Pay" {
                return Ok(Status::unimplemented("no such method").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(Bytes);
            Ok(grpc.unary(Pay(orders), req).await)
        })
    }
}

/// The lock of a call: its method.
fn method_key(req: &http::Request<tonic::body::Body>) -> Option<String> {
    let method = req.uri().path().strip_prefix('/')?;
    Some(format!("grpc:{method}"))
}

fn orders(calls: Arc<AtomicUsize>) -> Orders {
    Orders {
        calls,
        entered: None,
        pause: Duration::ZERO,
    }
}

/// One call of `/orders.Orders/Pay` through tonic's client.
async fn pay<S>(service: S) -> Result<tonic::Response<Vec<u8>>, Status>
where
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <S::ResponseBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut client = tonic::client::Grpc::new(service);
    client.ready().await.map_err(|e| {
        let e: Box<dyn std::error::Error + Send + Sync> = e.into();
        Status::unknown(format!("not ready: {e}"))
    })?;
    let path = http::uri::PathAndQuery::from_static("/orders.Orders/Pay");
    tokio::time::timeout(
        LIMIT,
        client.unary(tonic::Request::new(b"42".to_vec()), path, Bytes),
    )
    .await
    .unwrap_or_else(|_| Err(Status::deadline_exceeded("the call hung")))
}

/// A call holds its method's lock while the method runs and finds the
/// fencing token of that lock; a second call while it is held is
/// `ABORTED` (busy) and never reaches the method.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_call_holds_its_lock_and_a_busy_one_is_aborted() {
    let server = RedisServer::start();
    let lock_client = client(&server).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let (entered, mut entries) = mpsc::unbounded_channel();
    let slow = Orders {
        calls: calls.clone(),
        entered: Some(entered),
        pause: Duration::from_millis(500),
    };
    let service = LockLayer::new(lock_client.clone(), method_key)
        .ttl(Duration::from_secs(10))
        .layer(slow);

    let first = tokio::spawn(pay(service.clone()));
    let fence = tokio::time::timeout(LIMIT, entries.recv())
        .await
        .expect("the method started")
        .expect("a fence");
    let info = lock_client
        .inspect("grpc:orders.Orders/Pay")
        .await
        .expect("inspect");
    assert_eq!(
        info.map(|i| i.fencing_token),
        Some(fence),
        "the call's lock is held"
    );

    let busy = pay(service.clone())
        .await
        .expect_err("a second call while held");
    assert_eq!(busy.code(), Code::Aborted, "{busy:?}");
    assert!(busy.message().contains("held elsewhere"), "{busy:?}");

    let answer = first.await.expect("task").expect("the first call");
    assert_eq!(answer.into_inner(), fence.to_string().into_bytes());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the refused call ran the method"
    );
    let free = lock_client
        .inspect("grpc:orders.Orders/Pay")
        .await
        .expect("inspect");
    assert!(free.is_none(), "the lock was left held: {free:?}");

    // Free again: the next call passes, with a newer token.
    let next = pay(service).await.expect("a call after the first");
    let next_fence: u64 = String::from_utf8_lossy(next.get_ref())
        .parse()
        .expect("a token");
    assert!(next_fence > fence);
}

/// An unreachable Redis: the call is `UNAVAILABLE` (the code gRPC clients
/// retry), and the method never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_unavailable_to_a_tonic_client() {
    let unreachable = unreachable_client().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let service = LockLayer::new(unreachable, method_key).layer(orders(calls.clone()));
    let refused = pay(service).await.expect_err("no lock without a server");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// After a restart, a key this client had asked for is closed for about
/// its lease: the call is `UNAVAILABLE` with the gRPC retry pushback set to
/// that wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_pushback_says_when_to_retry() {
    let mut server = RedisServer::start();
    let calls = Arc::new(AtomicUsize::new(0));
    let service = LockLayer::new(client(&server).await, method_key)
        .ttl(Duration::from_secs(10))
        .layer(orders(calls.clone()));
    let other = client(&server).await;
    let _held = other
        .lock("grpc:orders.Orders/Pay")
        .acquire()
        .await
        .expect("held elsewhere");
    let busy = pay(service.clone()).await.expect_err("held elsewhere");
    assert_eq!(busy.code(), Code::Aborted, "{busy:?}");

    server.restart();
    let mut refused = pay(service.clone())
        .await
        .expect_err("closed after the restart");
    for _ in 0..50 {
        if refused.code() == Code::Unavailable
            && refused.metadata().get("grpc-retry-pushback-ms").is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        refused = pay(service.clone())
            .await
            .expect_err("closed after the restart");
    }
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    let pushback: Option<u64> = refused
        .metadata()
        .get("grpc-retry-pushback-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    assert!(
        pushback.is_some_and(|ms| (1..=10_000).contains(&ms)),
        "pushback: {pushback:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}
