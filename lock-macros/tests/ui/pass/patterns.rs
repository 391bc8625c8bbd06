//! Placeholders name the bindings of parameters written as patterns, as axum
//! extractors are: `Path(id): Path<u64>` lets the key say `<id>`.
#![deny(warnings)]

use std::time::Duration;

use leasehold::{LockClient, distributed_lock};

/// Like `axum::extract::Path`.
struct Path<T>(T);

struct State<T>(T);

struct Ctx {
    tenant: &'static str,
    counts: (u32, u32),
}

struct Point {
    x: i32,
    y: i32,
}

#[distributed_lock(key = "refund:<id>")]
async fn refund(Path(id): Path<u64>) -> Option<u64> {
    Some(id)
}

#[distributed_lock(key = "move:<x>:<y>:<n>:<m>")]
async fn moves(Point { x, ref y }: Point, (n, _): (u8, u8), mut m: u8) -> Option<i32> {
    m += 1;
    Some(x + *y + i32::from(n) + i32::from(m))
}

#[distributed_lock(key = "tenant:<tenant>:<first>:<second>:<whole.0>")]
async fn nested(
    State(Ctx { tenant, counts: (first, second) }): State<Ctx>,
    whole @ (_, _): (u8, u8),
    &[_, last]: &[u8; 2],
) -> Option<u8> {
    let _ = tenant;
    Some(whole.1 + last + u8::try_from(first + second).unwrap_or(0))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    leasehold::set_global_client(LockClient::in_memory());
    assert_eq!(refund(Path(7)).await, Some(7));
    assert_eq!(moves(Point { x: 1, y: 2 }, (3, 4), 5).await, Some(12));
    let ctx = Ctx {
        tenant: "acme",
        counts: (1, 2),
    };
    assert_eq!(nested(State(ctx), (9, 8), &[0, 1]).await, Some(12));

    // The rendered keys are the ones written: held elsewhere, the call skips.
    let other = LockClient::in_memory();
    let held = other
        .lock("refund:8")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    assert_eq!(refund(Path(8)).await, None);
    held.release().await.unwrap();
    let held = other
        .lock("move:1:2:3:5")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    assert_eq!(moves(Point { x: 1, y: 2 }, (3, 4), 5).await, None);
    held.release().await.unwrap();
    let held = other
        .lock("tenant:acme:1:2:9")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let ctx = Ctx {
        tenant: "acme",
        counts: (1, 2),
    };
    assert_eq!(nested(State(ctx), (9, 8), &[0, 1]).await, None);
    held.release().await.unwrap();
}
