//! `cargo bench --workspace --bench locks [-- --quick] [S1 S3 ...] [--impls raw,leasehold] [--reps N]`
//!
//! leasehold side by side with the raw Redis limit and the crates.io peers,
//! in one run on redis-server processes of its own (free loopback ports, the
//! test harness' code), so that every figure can be read as a ratio. Prints
//! a table with ratios vs raw and vs the best peer, the performance targets
//! checked, and writes one JSON object per scenario × implementation to
//! `target/bench/locks.jsonl`.
//!
//! The default run repeats each scenario 3 times (implementations
//! interleaved) and reports the median; `--quick` runs each once, shorter.

mod adapters;
mod cli;
mod count;
mod report;
mod run;
mod scenarios;
mod stats;
#[path = "../../../tests/support/mod.rs"]
mod support;
mod verdicts;

use std::time::Instant;

use scenarios::{Ctx, Knobs};
use support::RedisServer;

use cli::parse_args;
use run::run_all;
use verdicts::{checks, family_text, floor_text, layer_text};

#[global_allocator]
static ALLOCATOR: stats::Counting = stats::Counting;

fn main() {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!(
                "locks benchmark: run it with `cargo bench --workspace --bench locks` (skipped under cargo test)"
            );
            return;
        }
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    if let Some(n) = args.count {
        let server = RedisServer::start();
        if let Err(e) = count::run(&server, &args.kinds, n) {
            eprintln!("--count: {e}");
            std::process::exit(1);
        }
        return;
    }
    let started = Instant::now();
    let selected = |id: &str| args.only.is_empty() || args.only.iter().any(|o| o == id);

    let mut servers = vec![RedisServer::start()];
    if selected("S6") {
        servers.extend((0..4).map(|_| RedisServer::start()));
    }
    let ctx = Ctx {
        knobs: if args.quick {
            Knobs::quick()
        } else {
            Knobs::full()
        },
        kinds: args.kinds.clone(),
        servers,
        run_id: format!("{}", std::process::id()),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let server = server_label(&ctx.servers[0]);
    eprintln!(
        "locks bench: {} mode, {} repetition(s), impls {:?}, {server} on port(s) {:?}",
        if args.quick { "quick" } else { "default" },
        args.reps,
        ctx.kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
        ctx.servers
            .iter()
            .map(RedisServer::port)
            .collect::<Vec<_>>()
    );

    println!("Server: {server} ({})", support::server_bin());
    println!("How each implementation waits for a busy lock (S3, S4):");
    for kind in &ctx.kinds {
        println!("  {:<18} {}", kind.name(), kind.wait_policy());
    }
    println!(
        "All use one client shared by all tasks, ttl 10 s without renewal (S1-S6), \
         ttl 3 s with the library's own renewal (S7)."
    );
    let k = &ctx.knobs;
    println!(
        "Windows: S1/S2/S6 {:?} (after {:?} warm-up), S3 {:?}, S4 {:?} or {} handoffs, \
         S5 {} re-entries, S7 {} leases held {:?}, S8 {:?} per row, S9 S2's window (free rows) or S3's (busy rows); {} repetition(s), median shown.",
        k.pairs_window,
        k.warmup,
        k.contended_window,
        k.handoff_window,
        k.handoff_max,
        k.reentries,
        k.leases,
        k.hold,
        k.market_window,
        args.reps
    );

    let rows = runtime.block_on(run_all(&ctx, &args, &selected));
    let medians = report::medians(&rows);
    println!("\nResults on {server}");
    println!("{}", report::table(&medians));
    println!("{}", report::checks_text(&checks(&medians)));
    println!("{}", floor_text(&medians));
    println!("{}", family_text(&medians));
    println!("{}", layer_text(&rows, &medians));
    let path = report::jsonl_path();
    match report::write_jsonl(&medians, &path, &server) {
        Ok(n) => println!("\nwrote {n} records to {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
    println!(
        "{} run, {} repetition(s), median reported; took {:.1} s",
        if args.quick { "quick" } else { "default" },
        args.reps,
        started.elapsed().as_secs_f64()
    );
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
}

/// Which server the bench runs on, e.g. `valkey 9.1.2` or `redis 7.0.15`,
/// from its `INFO server` (Valkey also reports a frozen `redis_version`, so
/// its own name and version come first).
fn server_label(server: &RedisServer) -> String {
    let text = server.info("server");
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let (key, value) = line.trim().split_once(':')?;
            (key == name).then(|| value.trim().to_owned())
        })
    };
    match (field("server_name"), field("valkey_version")) {
        (Some(name), Some(version)) => format!("{name} {version}"),
        (None, Some(version)) => format!("valkey {version}"),
        _ => format!(
            "redis {}",
            field("redis_version").unwrap_or_else(|| "(unknown version)".to_owned())
        ),
    }
}
