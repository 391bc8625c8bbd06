//! `--count N`: a fixed number of acquire+release pairs per implementation,
//! for an instruction profile instead of a timing (this machine is shared:
//! CPU time per pair moves by 2x between runs, instructions do not).
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*counted_pairs*' \
//!     target/release/deps/locks-* --bench --count 20000 --impls leasehold
//! ```
//!
//! Each implementation runs its `N` pairs on 16 tasks of a one-thread
//! runtime, fresh keys (S2's shape), after 500 pairs of warm-up outside the
//! collected function; the client's instructions per pair are callgrind's
//! total over `N`.

use std::sync::Arc;
use std::time::Instant;

use crate::adapters::{Adapter, Kind, Res, Settings};
use crate::scenarios::TTL;
use crate::support::RedisServer;

const TASKS: u64 = 16;

/// Run `n` counted pairs for each of `kinds` against `server`.
pub fn run(server: &RedisServer, kinds: &[Kind], n: u64) -> Res<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let url = format!("redis://127.0.0.1:{}", server.port());
    for &kind in kinds {
        let adapter = runtime.block_on(Adapter::connect(
            kind,
            std::slice::from_ref(&url),
            Settings::plain(TTL),
        ))?;
        let adapter = Arc::new(adapter);
        runtime.block_on(pairs(adapter.clone(), 500, "warm"))?;
        let started = Instant::now();
        counted_pairs(&runtime, adapter.clone(), n)?;
        println!(
            "{}: {n} pairs in {:?} (instructions: callgrind's total / {n})",
            kind.name(),
            started.elapsed()
        );
        runtime.block_on(adapter.shutdown());
    }
    Ok(())
}

/// The collected function (`--toggle-collect='*counted_pairs*'`).
#[inline(never)]
fn counted_pairs(runtime: &tokio::runtime::Runtime, adapter: Arc<Adapter>, n: u64) -> Res<()> {
    runtime.block_on(pairs(adapter, n, "counted"))
}

async fn pairs(adapter: Arc<Adapter>, n: u64, prefix: &'static str) -> Res<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let adapter = adapter.clone();
        let share = n / TASKS + u64::from(t < n % TASKS);
        tasks.spawn(async move {
            for i in 0..share {
                let held = adapter.acquire(&format!("count:{prefix}:{t}:{i}")).await?;
                adapter.release(held).await?;
            }
            Res::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}
