//! The shapes the attribute accepts, each run against Redis with a check of
//! the Redis key it locks: methods (`&self`, `&mut self`, `self`), generic
//! functions, `impl Trait` parameters, lifetimes, placeholders from
//! parameters, nested fields and `self` fields; `?` and `return` in the
//! body; and the returned future being `Send`.

use std::fmt::Display;
use std::sync::Arc;

use leasehold::{LockClient, distributed_lock};

use crate::common::{AppError, Probe, held_locks, lock_key, probe, redis_client, within};
use crate::support::RedisServer;

struct Account {
    locks: LockClient,
    region: String,
    balance: i64,
    probe: Box<Probe>,
}

impl Account {
    #[distributed_lock(key = "acct:<self.region>:<id>", client = self.locks.clone())]
    async fn balance(&self, id: u32) -> Result<(i64, Vec<String>), AppError> {
        tokio::task::yield_now().await;
        Ok((self.balance + i64::from(id), (self.probe)()))
    }

    #[distributed_lock(key = "acct:<self.region>", wait = "5s", client = &self.locks)]
    async fn deposit(&mut self, amount: i64) -> Result<Vec<String>, AppError> {
        tokio::task::yield_now().await;
        self.balance += amount;
        Ok((self.probe)())
    }

    #[distributed_lock(key = "close:<self.region>", client = self.locks.clone())]
    async fn close(self) -> Option<(i64, Vec<String>)> {
        tokio::task::yield_now().await;
        let locks = (self.probe)();
        drop(self.locks);
        Some((self.balance, locks))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_with_every_receiver() {
    let server = Arc::new(RedisServer::start());
    let mut account = Account {
        locks: redis_client(&server).await,
        region: "eu".to_owned(),
        balance: 100,
        probe: probe(&server),
    };

    let (balance, locks) = within("&self", account.balance(7)).await.unwrap();
    assert_eq!(balance, 107);
    assert_eq!(locks, vec![lock_key("acct:eu:7")]);

    let locks = within("&mut self", account.deposit(50)).await.unwrap();
    assert_eq!(account.balance, 150);
    assert_eq!(locks, vec![lock_key("acct:eu")]);

    let (balance, locks) = within("self", account.close()).await.unwrap();
    assert_eq!(balance, 150);
    assert_eq!(locks, vec![lock_key("close:eu")]);
    assert!(held_locks(&server).is_empty(), "every lock released");
}

#[distributed_lock(key = "item:<item>", client = client)]
async fn generic<T>(
    client: &LockClient,
    item: T,
    probe: &Probe,
) -> Result<(String, Vec<String>), AppError>
where
    T: Display + Send + Sync,
{
    tokio::task::yield_now().await;
    Ok((item.to_string(), probe()))
}

#[distributed_lock(key = "tag:<tag>:<n>", client = client)]
async fn impl_trait(
    client: &LockClient,
    tag: impl Display + Send,
    n: impl Into<u64> + Display + Send,
    probe: &Probe,
) -> Option<(u64, Vec<String>)> {
    tokio::task::yield_now().await;
    Some((n.into(), probe()))
}

#[distributed_lock(key = "name:<name>", client = client)]
async fn with_lifetime<'a, 'c>(client: &'c LockClient, name: &'a str) -> Result<&'a str, AppError> {
    tokio::task::yield_now().await;
    Ok(&name[1..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_functions_and_impl_trait_parameters() {
    let server = Arc::new(RedisServer::start());
    let client = redis_client(&server).await;
    let probe = probe(&server);

    let (item, locks) = generic(&client, 42_u8, &*probe).await.unwrap();
    assert_eq!((item.as_str(), locks), ("42", vec![lock_key("item:42")]));
    let (item, locks) = generic(&client, "book", &*probe).await.unwrap();
    assert_eq!(
        (item.as_str(), locks),
        ("book", vec![lock_key("item:book")])
    );

    let (n, locks) = impl_trait(&client, "red", 5_u32, &*probe).await.unwrap();
    assert_eq!((n, locks), (5, vec![lock_key("tag:red:5")]));

    let name = String::from("xavier");
    assert_eq!(with_lifetime(&client, &name).await.unwrap(), "avier");
    assert!(held_locks(&server).is_empty());
}

struct Customer {
    id: u64,
}

struct Order {
    id: u64,
    customer: Customer,
}

#[distributed_lock(key = "order:<id>", client = client)]
async fn by_parameter(
    client: &LockClient,
    id: u64,
    probe: &Probe,
) -> Result<Vec<String>, AppError> {
    Ok(probe())
}

#[distributed_lock(key = "customer:<order.customer.id>:order:<order.id>", client = client)]
async fn by_nested_field(
    client: &LockClient,
    order: &Order,
    probe: &Probe,
) -> Result<Vec<String>, AppError> {
    Ok(probe())
}

#[distributed_lock(key = "pair:<pair.0>-<pair.1>:<<raw>>", client = client)]
async fn by_tuple_field_and_escapes(
    client: &LockClient,
    pair: (u8, char),
    probe: &Probe,
) -> Result<Vec<String>, AppError> {
    Ok(probe())
}

#[distributed_lock(key = "fixed", client = client)]
async fn without_placeholder(client: &LockClient, probe: &Probe) -> Result<Vec<String>, AppError> {
    Ok(probe())
}

/// The rendered key names the Redis key that exists while the body runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholders_render_the_redis_key() {
    let server = Arc::new(RedisServer::start());
    let client = redis_client(&server).await;
    let probe = probe(&server);
    let order = Order {
        id: 42,
        customer: Customer { id: 9 },
    };

    assert_eq!(
        by_parameter(&client, 42, &*probe).await.unwrap(),
        vec!["leasehold:{order:42}:lock"]
    );
    assert_eq!(
        by_nested_field(&client, &order, &*probe).await.unwrap(),
        vec![lock_key("customer:9:order:42")]
    );
    assert_eq!(
        by_tuple_field_and_escapes(&client, (3, 'x'), &*probe)
            .await
            .unwrap(),
        vec![lock_key("pair:3-x:<raw>")]
    );
    assert_eq!(
        without_placeholder(&client, &*probe).await.unwrap(),
        vec![lock_key("fixed")]
    );
    assert!(held_locks(&server).is_empty());
}

#[distributed_lock(key = "parse:<text>", client = client)]
async fn parse(client: &LockClient, text: &str) -> Result<u32, AppError> {
    if text.is_empty() {
        return Ok(0);
    }
    let n: u32 = text.parse()?;
    tokio::task::yield_now().await;
    Ok(n * 2)
}

/// `return` and `?` in the body convert exactly as without the attribute,
/// and the lock is released on every path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_and_question_mark_in_the_body() {
    let server = RedisServer::start();
    let client = redis_client(&server).await;
    assert_eq!(parse(&client, "21").await.unwrap(), 42);
    assert_eq!(parse(&client, "").await.unwrap(), 0);
    match parse(&client, "x").await {
        Err(AppError::Parse(e)) => assert_eq!(e, "x".parse::<u32>().unwrap_err()),
        other => panic!("expected the parse error through `?`, got {other:?}"),
    }
    assert!(held_locks(&server).is_empty());
}

fn assert_send<T: Send>(value: T) -> T {
    value
}

/// The returned futures are `Send`: they can be spawned (a compile-time
/// check; the calls also run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returned_futures_are_send() {
    let server = Arc::new(RedisServer::start());
    let client = redis_client(&server).await;
    let account = Arc::new(Account {
        locks: client.clone(),
        region: "us".to_owned(),
        balance: 1,
        probe: probe(&server),
    });

    let by_ref = tokio::spawn({
        let account = account.clone();
        async move { account.balance(1).await }
    });
    let by_value = tokio::spawn({
        let client = client.clone();
        async move { parse(&client, "4").await }
    });
    let generic_call = tokio::spawn({
        let (client, probe) = (client.clone(), crate::common::probe(&server));
        async move { generic(&client, 'g', &*probe).await.map(|(item, _)| item) }
    });
    assert_eq!(within("spawned", by_ref).await.unwrap().unwrap().0, 2);
    assert_eq!(within("spawned", by_value).await.unwrap().unwrap(), 8);
    assert_eq!(within("spawned", generic_call).await.unwrap().unwrap(), "g");
    assert_eq!(assert_send(parse(&client, "1")).await.unwrap(), 2);
}

#[distributed_lock(key = "opaque:<n>", client = client)]
async fn opaque_return(client: &LockClient, n: u8) -> Option<impl Display> {
    tokio::task::yield_now().await;
    Some(n * 2)
}

/// An `impl Trait` in the return type (the fallback's type is inferred).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impl_trait_return_type() {
    let server = RedisServer::start();
    let (mine, theirs) = (redis_client(&server).await, redis_client(&server).await);
    assert_eq!(opaque_return(&mine, 4).await.unwrap().to_string(), "8");
    let held = theirs.lock("opaque:4").acquire().await.unwrap();
    assert!(opaque_return(&mine, 4).await.is_none());
    held.release().await.unwrap();
}
