//! A document service: many readers of a document at once, or one editor,
//! with a read-write lock per document.
//!
//! ```text
//! cargo run -p leasehold-examples --example documents
//! ```
//!
//! Readers take a read share of `doc:<id>`, editors the write side. Readers
//! share; an editor waits for the readers inside to finish, and readers that
//! arrive after a waiting editor wait behind it, so a stream of readers never
//! starves an edit. Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`);
//! without one it says so and runs in memory.

use std::sync::Arc;
use std::time::Duration;

use leasehold::{LockClient, LockError, RwLock};
use tokio::sync::Mutex;

/// The stored documents (here: one text in this process; in a real service,
/// a database row written with the write side's fencing token).
struct Store {
    text: Mutex<String>,
}

async fn read(doc: RwLock, store: Arc<Store>, reader: usize) -> Result<(), LockError> {
    let share = doc
        .read()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10));
    share
        .run(async {
            let text = store.text.lock().await.clone();
            tokio::time::sleep(Duration::from_millis(20)).await;
            println!("reader {reader} read {text:?}");
        })
        .await
}

async fn edit(doc: RwLock, store: Arc<Store>, revision: usize) -> Result<(), LockError> {
    let editor = doc
        .write()
        .ttl(Duration::from_secs(10))
        .renew(true)
        .wait(Duration::from_secs(10))
        .acquire()
        .await?;
    *store.text.lock().await = format!("revision {revision}");
    println!(
        "editor wrote revision {revision} (fencing token {})",
        editor.fencing_token()
    );
    editor.release().await
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let client = match LockClient::connect(&url).await {
        Ok(client) => client,
        Err(error) => {
            println!("no Redis at {url} ({error}); running in memory");
            LockClient::in_memory()
        }
    };
    let store = Arc::new(Store {
        text: Mutex::new("revision 0".to_owned()),
    });
    let doc = client.rw_lock("doc:7");
    let mut tasks = Vec::new();
    for n in 0..9 {
        let (doc, store) = (doc.clone(), store.clone());
        tasks.push(if n % 3 == 2 {
            tokio::spawn(edit(doc, store, n / 3 + 1))
        } else {
            tokio::spawn(read(doc, store, n))
        });
    }
    for task in tasks {
        match task.await {
            Ok(result) => result?,
            Err(join) => println!("a task panicked: {join}"),
        }
    }
    Ok(())
}
