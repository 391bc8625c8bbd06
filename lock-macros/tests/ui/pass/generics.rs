//! Generic functions, where-clauses, lifetimes, `impl Trait` parameters, nested
//! fields and tuple indices in placeholders, and pattern parameters.
#![deny(warnings)]

use std::fmt::Display;

use leasehold::distributed_lock;
use leasehold::{LockClient, LockError};

struct Customer {
    id: u64,
}

struct Order {
    customer: Customer,
    line: (u32, &'static str),
}

#[distributed_lock(key = "item:<item>", ttl = "500ms")]
async fn generic<T: Display + Send>(item: T, extra: Vec<T>) -> Result<usize, LockError> {
    Ok(extra.len() + item.to_string().len())
}

#[distributed_lock(key = "w:<item>")]
async fn with_where<'a, T>(item: &'a T, fallback: &'a str) -> Option<&'a str>
where
    T: Display + Sync + ?Sized,
{
    if item.to_string().is_empty() {
        Some(fallback)
    } else {
        None
    }
}

#[distributed_lock(key = "impl:<name>:<count>")]
async fn impl_params(name: impl Display, count: impl Into<u64> + Copy + Display) -> Option<u64> {
    let _ = name.to_string();
    Some(count.into())
}

#[distributed_lock(key = "order:<order.customer.id>:<order.line.0>:<order.line.1>")]
async fn nested(order: &Order) -> Option<u64> {
    Some(order.customer.id)
}

#[distributed_lock(key = "pair:<label>")]
async fn patterns((a, b): (u32, u32), label: &str, mut total: u32) -> Option<u32> {
    total += a + b;
    let _ = label;
    Some(total)
}

#[distributed_lock(key = "const:<value>")]
async fn with_const<const N: usize>(value: u8) -> Option<[u8; N]> {
    Some([value; N])
}

/// A key that is a single placeholder.
#[distributed_lock(key = "<name>")]
async fn whole_key(name: &str, owned: String) -> Option<usize> {
    Some(name.len() + owned.len())
}

#[distributed_lock(key = "<owned>")]
async fn whole_key_owned(owned: String) -> Option<String> {
    Some(owned)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    leasehold::set_global_client(LockClient::in_memory());
    assert_eq!(generic("ab", vec!["c"]).await.ok(), Some(3));
    assert_eq!(generic(7u8, vec![]).await.ok(), Some(1));
    assert_eq!(with_where("", "fb").await, Some("fb"));
    assert_eq!(impl_params("n", 4u32).await, Some(4));
    let order = Order {
        customer: Customer { id: 9 },
        line: (1, "x"),
    };
    assert_eq!(nested(&order).await, Some(9));
    assert_eq!(patterns((1, 2), "l", 3).await, Some(6));
    assert_eq!(with_const::<2>(5).await, Some([5, 5]));
    assert_eq!(whole_key("ab", "c".to_owned()).await, Some(3));
    assert_eq!(whole_key_owned("x".to_owned()).await.as_deref(), Some("x"));
}
