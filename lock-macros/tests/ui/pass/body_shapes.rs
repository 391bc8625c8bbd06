//! Every shape of body compiles without a warning under `#![deny(warnings)]`:
//! one-line bodies, empty bodies, bodies ending in `return`, `?`, a block, a
//! `match`, a loop, a diverging call, items and inner attributes.
#![deny(warnings)]

use leasehold::{LockClient, LockError, distributed_lock};

#[derive(Debug)]
struct AppError(#[allow(dead_code)] LockError);

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError(err)
    }
}

#[distributed_lock(key = "one-line")]
async fn one_line() -> Result<u32, AppError> { Ok(1) }

#[distributed_lock(key = "one-line-option")]
async fn one_line_option() -> Option<u32> { Some(2) }

#[distributed_lock(key = "one-line-literal")]
async fn one_line_unit() { () }

#[distributed_lock(key = "empty")]
async fn empty() {}

#[distributed_lock(key = "ends-in-return")]
async fn ends_in_return(n: u32) -> Result<u32, AppError> {
    return Ok(n);
}

#[distributed_lock(key = "return-without-semicolon")]
async fn return_without_semicolon(n: u32) -> Option<u32> {
    return Some(n)
}

#[distributed_lock(key = "unit-return")]
async fn unit_return() {
    return;
}

#[distributed_lock(key = "ends-in-question-mark")]
async fn ends_in_question_mark(text: String) -> Result<u32, AppError> {
    Ok(text.len().try_into().map_err(|_| AppError(LockError::NoGlobalClient))?)
}

#[distributed_lock(key = "question-mark-option")]
async fn question_mark_option(v: Vec<u32>) -> Option<u32> {
    v.first().copied()?.checked_add(1)
}

#[distributed_lock(key = "nested-block")]
async fn nested_block() -> Result<u32, AppError> {
    {
        Ok(3)
    }
}

#[distributed_lock(key = "block-after-statement")]
async fn block_after_statement() -> Result<u32, AppError> {
    let x = 4;
    {
        Ok(x)
    }
}

#[distributed_lock(key = "match")]
async fn ends_in_match(n: u32) -> Option<u32> {
    match n {
        0 => None,
        n => Some(n),
    }
}

#[distributed_lock(key = "if")]
async fn ends_in_if(n: u32) -> Option<u32> { if n > 0 { Some(n) } else { None } }

#[distributed_lock(key = "loop")]
async fn ends_in_loop() -> Result<u32, AppError> {
    let mut i = 0;
    loop {
        i += 1;
        if i == 3 {
            break Ok(i);
        }
    }
}

#[distributed_lock(key = "await")]
async fn ends_in_await() -> Result<u32, AppError> { one_line().await }

#[distributed_lock(key = "items")]
async fn with_items() -> Option<u32> {
    #![allow(clippy::items_after_statements)]
    const BASE: u32 = 5;
    fn helper() -> u32 {
        BASE
    }
    Some(helper())
}

#[distributed_lock(key = "forever", renew)]
async fn runs_forever() {
    loop {
        tokio::task::yield_now().await;
    }
}

#[distributed_lock(key = "panics")]
async fn panics() -> Option<u8> {
    panic!("a body that diverges")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    leasehold::set_global_client(LockClient::in_memory());
    assert_eq!(one_line().await.ok(), Some(1));
    assert_eq!(one_line_option().await, Some(2));
    one_line_unit().await;
    empty().await;
    assert_eq!(ends_in_return(4).await.ok(), Some(4));
    assert_eq!(return_without_semicolon(5).await, Some(5));
    unit_return().await;
    assert_eq!(ends_in_question_mark("abc".into()).await.ok(), Some(3));
    assert_eq!(question_mark_option(vec![1]).await, Some(2));
    assert_eq!(question_mark_option(vec![]).await, None);
    assert_eq!(nested_block().await.ok(), Some(3));
    assert_eq!(block_after_statement().await.ok(), Some(4));
    assert_eq!(ends_in_match(0).await, None);
    assert_eq!(ends_in_if(6).await, Some(6));
    assert_eq!(ends_in_loop().await.ok(), Some(3));
    assert_eq!(ends_in_await().await.ok(), Some(1));
    assert_eq!(with_items().await, Some(5));
    // Diverging bodies compile without `unreachable_code` warnings.
    let _ = (runs_forever, panics);
}
