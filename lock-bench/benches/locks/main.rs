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
mod count;
mod report;
mod scenarios;
mod stats;
#[path = "../../../tests/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use std::time::Instant;

use adapters::Kind;
use marketplace::Variant;
use report::{Check, Record, Row};
use scenarios::{Ctx, Knobs, contention, family, layer, market, reentry, renewal, throughput};
use support::RedisServer;

#[global_allocator]
static ALLOCATOR: stats::Counting = stats::Counting;

const USAGE: &str = "usage: cargo bench --workspace --bench locks -- [--quick] [--reps N] [--count N] [--impls raw,raw-fenced,raw-scripts,leasehold,rslock,rlock,async-redis-lock,distkit,distributed-lock] [S1 .. S10]";

struct Args {
    quick: bool,
    reps: usize,
    kinds: Vec<Kind>,
    only: Vec<String>,
    /// `--count N`: N pairs per implementation for an instruction profile
    /// (`count.rs`), no scenario.
    count: Option<u64>,
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut args = Args {
        quick: false,
        reps: 0,
        kinds: Kind::ALL.to_vec(),
        only: Vec::new(),
        count: None,
    };
    let mut invoked_by_cargo_bench = false;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--bench" => invoked_by_cargo_bench = true,
            "--run" => invoked_by_cargo_bench = true,
            "--quick" => args.quick = true,
            "--reps" => {
                let n = it.next().ok_or("--reps needs a number")?;
                args.reps = n.parse().map_err(|_| format!("--reps {n}: not a number"))?;
            }
            "--count" => {
                let n = it.next().ok_or("--count needs a number")?;
                args.count = Some(
                    n.parse()
                        .map_err(|_| format!("--count {n}: not a number"))?,
                );
            }
            "--impls" => {
                let list = it.next().ok_or("--impls needs a list")?;
                args.kinds = list
                    .split(',')
                    .map(|n| Kind::from_name(n.trim()).ok_or(format!("unknown impl {n}")))
                    .collect::<Result<_, _>>()?;
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            s if s.len() == 2 && s[..1].eq_ignore_ascii_case("s") => {
                args.only.push(s.to_ascii_uppercase());
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if !invoked_by_cargo_bench {
        // `cargo test --benches` / `--all-targets` runs this binary without
        // `--bench`: a benchmark has no place in a test run.
        return Ok(None);
    }
    if args.reps == 0 {
        args.reps = if args.quick { 1 } else { 3 };
    }
    Ok(Some(args))
}

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
    println!("{}", layer_text(&medians));
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

async fn run_all(ctx: &Ctx, args: &Args, selected: &dyn Fn(&str) -> bool) -> Vec<Row> {
    let mut rows = Vec::new();
    let kinds = ctx.kinds.clone();
    let reps = args.reps;
    let log = |row: Row, rows: &mut Vec<Row>| {
        match &row {
            Row::Ok(r) => eprintln!(
                "  {:<22} {:<24} {:>10.0} ops/s  p50 {:>9.1} us  p99 {:>9.1} us",
                r.scenario, r.imp, r.ops_per_s, r.p50_us, r.p99_us
            ),
            Row::Na { scenario, imp, .. } => eprintln!("  {scenario:<22} {imp:<24} n/a"),
            Row::Failed {
                scenario,
                imp,
                error,
            } => eprintln!("  {scenario:<22} {imp:<24} FAILED: {error}"),
        }
        rows.push(row);
    };
    let flush = || ctx.main().flushall();
    // Each repetition starts with another implementation, so that none is
    // always measured first (right after a flush or another scenario).
    let order = |rep: usize| -> Vec<Kind> {
        let mut k = kinds.clone();
        if !k.is_empty() {
            let n = k.len();
            k.rotate_left(rep % n);
        }
        k
    };

    if selected("S1") {
        for rep in 0..reps {
            for &kind in &order(rep) {
                // Every row on an empty keyspace: the keys another
                // implementation leaves (raw-fenced's and raw-scripts' fence
                // keys live an hour) grow the server's tables, and every
                // command after them paid for it (SET 0.3 -> 1.3 us).
                flush();
                let row = throughput::s1_s2(ctx, "S1 uncontended", kind, 1, rep).await;
                log(row, &mut rows);
            }
        }
        flush();
    }
    if selected("S2") {
        for rep in 0..reps {
            for &kind in &order(rep) {
                flush();
                let row = throughput::s1_s2(ctx, "S2 parallel", kind, 64, rep).await;
                log(row, &mut rows);
            }
        }
        flush();
    }
    if selected("S3") {
        for rep in 0..reps {
            for &kind in &order(rep) {
                let row = contention::s3(ctx, "S3 contended", kind, rep, 1).await;
                log(row, &mut rows);
            }
            if kinds.contains(&Kind::Leasehold) {
                // The same 32 tasks spread over 4 clients (as over 4 processes).
                let row = contention::s3(ctx, "S3 contended", Kind::Leasehold, rep, 4).await;
                log(row, &mut rows);
            }
        }
        flush();
    }
    if selected("S4") {
        let rtt = match contention::s4_rtt(ctx).await {
            Ok(rtt) => rtt,
            Err(e) => {
                eprintln!("PING round trip not measured: {e}");
                contention::Rtt {
                    hot: (f64::NAN, f64::NAN),
                    idle: (f64::NAN, f64::NAN),
                }
            }
        };
        for rep in 0..reps {
            for &kind in &order(rep) {
                let row = contention::s4(ctx, "S4 handoff", kind, rep, rtt).await;
                log(row, &mut rows);
            }
        }
        flush();
    }
    if selected("S5") {
        for rep in 0..reps {
            for &kind in &order(rep) {
                let row = reentry::s5(ctx, "S5 re-entry", kind, rep).await;
                log(row, &mut rows);
            }
        }
        flush();
    }
    if selected("S6") {
        for rep in 0..reps {
            for nodes in [1, 5] {
                let scenario = if nodes == 1 {
                    "S6 redlock 1 node".to_owned()
                } else {
                    format!("S6 redlock {nodes} nodes")
                };
                for &kind in &order(rep) {
                    for server in &ctx.servers {
                        server.flushall();
                    }
                    let row = throughput::s6(ctx, &scenario, kind, nodes, rep).await;
                    log(row, &mut rows);
                }
            }
        }
        for server in &ctx.servers {
            server.flushall();
        }
    }
    if selected("S7") {
        for rep in 0..reps {
            for &kind in &order(rep) {
                flush();
                let row = renewal::s7(ctx, "S7 renewal", kind, rep).await;
                log(row, &mut rows);
            }
            flush();
        }
    }
    if selected("S8") {
        for rep in 0..reps {
            for (sellers, buyers) in market::CONFIGS {
                for variant in Variant::ALL {
                    let row = market::s8(ctx, sellers, buyers, variant, rep).await;
                    log(row, &mut rows);
                }
            }
        }
        flush();
    }
    if selected("S9") {
        for rep in 0..reps {
            let mut free: Vec<&family::FreeRow> = family::FREE_ROWS
                .iter()
                .filter(|row| kinds.contains(&row.kind))
                .collect();
            if !free.is_empty() {
                let n = free.len();
                free.rotate_left(rep % n);
            }
            for row in free {
                flush();
                log(family::free(ctx, row, rep).await, &mut rows);
            }
            let family_kinds: Vec<Kind> = order(rep)
                .into_iter()
                .filter(|k| matches!(k, Kind::Leasehold | Kind::Distkit | Kind::DistributedLock))
                .collect();
            for &kind in &family_kinds {
                log(family::semaphore(ctx, kind, rep).await, &mut rows);
            }
            for &kind in &family_kinds {
                log(family::rw(ctx, kind, rep).await, &mut rows);
            }
        }
        flush();
    }
    if selected("S10") && kinds.contains(&Kind::Leasehold) {
        for rep in 0..reps {
            let mut variants = layer::Variant::ALL;
            let n = variants.len();
            variants.rotate_left(rep % n);
            for variant in variants {
                flush();
                log(layer::s10(ctx, variant, rep).await, &mut rows);
            }
        }
        flush();
    }
    rows
}

/// S9's free rows as ratios to leasehold's free plain lock: pairs/s, and
/// Redis CPU per pair (what the target "a free permit or read share costs
/// about what a free lock costs" is about).
fn family_text(rows: &[Row]) -> String {
    let mut out =
        String::from("\nThe lock family, free (S9: 64 tasks on fresh keys), x leasehold lock\n");
    let Some(lock) = report::find(rows, family::FREE, "leasehold lock") else {
        out.push_str("  not measured (needs S9 with leasehold)\n");
        return out;
    };
    let cpu = |r: &Record| r.get_f64("server_us_per_pair").unwrap_or(f64::NAN);
    for row in &family::FREE_ROWS {
        if let Some(r) = report::find(rows, family::FREE, row.imp) {
            let _ = writeln!(
                out,
                "  {:<22} pairs/s {:>8.0} = {:.2} x; Redis CPU per pair {:>5.1} us = {:.2} x; {}",
                r.imp,
                r.ops_per_s,
                r.ops_per_s / lock.ops_per_s,
                cpu(r),
                cpu(r) / cpu(lock),
                r.get("server_top")
                    .map(|v| match v {
                        report::Value::S(s) => s.clone(),
                        _ => String::new(),
                    })
                    .unwrap_or_default()
            );
        }
    }
    out
}

/// Where S1's and S2's gap to raw lies, from the hand-sent floors (see
/// `adapters/raw.rs`): raw-fenced x raw is what a fencing token that
/// survives data loss costs at the least; raw-scripts x raw what leasehold's
/// scripts cost; leasehold x raw-scripts what the library adds around them.
fn floor_text(rows: &[Row]) -> String {
    let get = |scenario: &str, imp: &str| report::find(rows, scenario, imp);
    let mut out = String::from(
        "\nScripts vs library (raw-fenced: SET NX + the least fencing script; \
         raw-scripts: leasehold's own scripts; both sent by raw's client)\n",
    );
    let mut any = false;
    for (scenario, name) in [("S1 uncontended", "S1"), ("S2 parallel", "S2")] {
        let Some(raw) = get(scenario, "raw") else {
            continue;
        };
        let present: Vec<&Record> = ["raw", "raw-fenced", "raw-scripts", "leasehold"]
            .iter()
            .filter_map(|imp| get(scenario, imp))
            .collect();
        if present.len() < 2 {
            continue;
        }
        any = true;
        let ratios: Vec<String> = present[1..]
            .iter()
            .map(|r| format!("{} {:.2}", r.imp, r.ops_per_s / raw.ops_per_s))
            .collect();
        let library = match (get(scenario, "leasehold"), get(scenario, "raw-scripts")) {
            (Some(lh), Some(scripts)) => format!(
                "; leasehold {:.2} x raw-scripts",
                lh.ops_per_s / scripts.ops_per_s
            ),
            _ => String::new(),
        };
        let per_pair = |field: &str| -> String {
            present
                .iter()
                .map(|r| format!("{} {:.1}", r.imp, r.get_f64(field).unwrap_or(f64::NAN)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "  {name}  pairs/s x raw: {}{library}\n      Redis CPU per pair, us: {}\n      client CPU per pair, us: {}\n      client heap allocations per pair: {}",
            ratios.join(", "),
            per_pair("server_us_per_pair"),
            per_pair("client_cpu_us_per_pair"),
            per_pair("allocs_per_pair"),
        );
    }
    // S7's taking phase: the same 64 tasks taking fresh leases, no release.
    let taking: Vec<&Record> = ["raw", "raw-fenced", "raw-scripts", "leasehold"]
        .iter()
        .filter_map(|imp| get("S7 renewal", imp))
        .collect();
    let best_peer = report::PEERS
        .iter()
        .filter_map(|imp| get("S7 renewal", imp))
        .max_by(|a, b| a.ops_per_s.total_cmp(&b.ops_per_s));
    if let (false, Some(best)) = (taking.is_empty(), best_peer) {
        any = true;
        let rates: Vec<String> = taking
            .iter()
            .map(|r| format!("{} {:.2}", r.imp, r.ops_per_s / best.ops_per_s))
            .collect();
        let _ = writeln!(
            out,
            "  S7  taking the leases, acquisitions/s x best peer ({} {:.0}/s): {}",
            best.imp,
            best.ops_per_s,
            rates.join(", ")
        );
    }
    if !any {
        out.push_str("  not measured (needs raw and a floor or leasehold in S1, S2 or S7)\n");
    }
    out
}

/// The performance targets (docs/performance.md), against the median rows.
fn checks(rows: &[Row]) -> Vec<Check> {
    let get = |scenario: &str, imp: &str| report::find(rows, scenario, imp);
    let peers = |scenario: &str| -> Vec<&Record> {
        report::PEERS
            .iter()
            .filter_map(|p| get(scenario, p))
            .collect()
    };
    let mut out = Vec::new();

    // S1, S2: ahead of every peer; S2 also >= 0.85 x raw, and at most 1.3 x
    // raw's Redis time and 1.3 x raw's client CPU per pair.
    for (scenario, name, floor) in [
        ("S1 uncontended", "S1", None),
        ("S2 parallel", "S2", Some(0.85)),
    ] {
        let (lh, raw) = (get(scenario, "leasehold"), get(scenario, "raw"));
        let mut check = Check {
            name: name.to_owned(),
            target: match floor {
                Some(f) => format!("pairs/s >= {f} x raw, ahead of every peer"),
                None => "pairs/s ahead of every peer".to_owned(),
            },
            measured: "not measured".to_owned(),
            pass: None,
        };
        if let (Some(lh), Some(raw)) = (lh, raw) {
            let ratio = lh.ops_per_s / raw.ops_per_s;
            let peer_text: Vec<String> = peers(scenario)
                .iter()
                .map(|p| format!("{} {:.2}", p.imp, p.ops_per_s / raw.ops_per_s))
                .collect();
            let ahead = peers(scenario).iter().all(|p| lh.ops_per_s > p.ops_per_s);
            check.measured = format!(
                "leasehold {ratio:.2} x raw; peers x raw: {}",
                peer_text.join(", ")
            );
            check.pass = Some(floor.is_none_or(|f| ratio >= f) && ahead);
            out.push(check);
            if floor.is_some() {
                for (field, what, limit) in [
                    ("server_us_per_pair", "Redis CPU", 1.3),
                    ("client_cpu_us_per_pair", "client CPU", 1.3),
                ] {
                    let (l, r) = (
                        lh.get_f64(field).unwrap_or(f64::NAN),
                        raw.get_f64(field).unwrap_or(f64::NAN),
                    );
                    out.push(Check {
                        name: name.to_owned(),
                        target: format!("{what} per pair <= {limit} x raw's"),
                        measured: format!("{l:.1} us vs raw {r:.1} us = {:.2} x", l / r),
                        pass: Some(l <= limit * r),
                    });
                }
            }
        } else {
            out.push(check);
        }
    }

    if let Some(lh) = get("S3 contended", "leasehold") {
        let handoffs = lh.get_f64("handoffs_per_s").unwrap_or(f64::NAN);
        let best = peers("S3 contended")
            .iter()
            .filter_map(|p| p.get_f64("handoffs_per_s").map(|h| (h, p.imp.clone())))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let (ratio, measured) = match &best {
            Some((h, imp)) => (
                handoffs / h,
                format!(
                    "{handoffs:.0} handoffs/s = {:.1} x best peer ({imp} {h:.1}/s)",
                    handoffs / h
                ),
            ),
            None => (
                f64::NAN,
                format!("{handoffs:.0} handoffs/s, no peer measured"),
            ),
        };
        out.push(Check {
            name: "S3".into(),
            target: "handoffs/s >= 50 x best polling peer".into(),
            measured,
            pass: best.is_some().then_some(ratio >= 50.0),
        });
        let min = lh.get_f64("min_cs_per_task").unwrap_or(0.0);
        let max = lh.get_f64("max_cs_per_task").unwrap_or(0.0);
        out.push(Check {
            name: "S3".into(),
            target: "no task starved: fewest >= most / 4".into(),
            measured: format!("fewest {min:.0}, most {max:.0} critical sections per task"),
            pass: Some(min * 4.0 >= max),
        });
        let exact = matches!(lh.get("exact"), Some(report::Value::B(true)));
        out.push(Check {
            name: "S3".into(),
            target: "counter exact".into(),
            measured: format!("exact = {exact}"),
            pass: Some(exact),
        });
    }

    if let Some(lh4) = get("S3 contended", "leasehold (4 clients)") {
        let min = lh4.get_f64("min_cs_per_task").unwrap_or(0.0);
        let max = lh4.get_f64("max_cs_per_task").unwrap_or(0.0);
        out.push(Check {
            name: "S3".into(),
            target: "same, tasks over 4 clients (4 processes)".into(),
            measured: format!(
                "fewest {min:.0}, most {max:.0}; {:.0} handoffs/s",
                lh4.get_f64("handoffs_per_s").unwrap_or(f64::NAN)
            ),
            pass: Some(min * 4.0 >= max),
        });
    }

    if let Some(lh) = get("S4 handoff", "leasehold") {
        let rtt = lh.get_f64("rtt_p50_us").unwrap_or(f64::NAN);
        let idle = lh.get_f64("rtt_idle_p50_us").unwrap_or(f64::NAN);
        let peer_text: Vec<String> = peers("S4 handoff")
            .iter()
            .map(|p| format!("{} {:.0} x", p.imp, p.p50_us / rtt))
            .collect();
        out.push(Check {
            name: "S4".into(),
            // One round trip from holder to waiter: an idle PING's time.
            target: "handoff p50 <= 1.1 x an idle PING's p50".into(),
            measured: format!(
                "{:.1} us = {:.2} x PING after 2 ms idle ({idle:.1} us); {:.2} x a back-to-back PING ({rtt:.1} us); peers {}",
                lh.p50_us,
                lh.p50_us / idle,
                lh.p50_us / rtt,
                peer_text.join(", ")
            ),
            pass: Some(lh.p50_us <= 1.1 * idle),
        });
    }

    if let Some(lh) = get("S5 re-entry", "leasehold") {
        let c = lh.get_f64("commands_per_reentry").unwrap_or(f64::NAN);
        let ns = lh.get_f64("ns_per_reentry").unwrap_or(f64::NAN);
        out.push(Check {
            name: "S5".into(),
            target: "0 Redis commands per re-entry".into(),
            measured: format!("{c:.4} commands, {ns:.0} ns per re-entry"),
            pass: Some(c == 0.0),
        });
    }

    if let (Some(one), Some(five)) = (
        get("S6 redlock 1 node", "leasehold"),
        get("S6 redlock 5 nodes", "leasehold"),
    ) {
        let rs = match (
            get("S6 redlock 1 node", "rslock"),
            get("S6 redlock 5 nodes", "rslock"),
        ) {
            (Some(a), Some(b)) => format!("; rslock {:.2} x", b.p50_us / a.p50_us),
            _ => String::new(),
        };
        let single = get("S1 uncontended", "leasehold")
            .map(|s1| {
                format!(
                    "; vs single-node client (S1) {:.2} x",
                    five.p50_us / s1.p50_us
                )
            })
            .unwrap_or_default();
        out.push(Check {
            name: "S6".into(),
            target: "5-node acquire p50 <= 3 x 1-node".into(),
            measured: format!(
                "{:.1} us vs {:.1} us = {:.2} x{single}{rs}",
                five.p50_us,
                one.p50_us,
                five.p50_us / one.p50_us
            ),
            pass: Some(five.p50_us <= 3.0 * one.p50_us),
        });
        for (scenario, lh) in [("S6 redlock 1 node", one), ("S6 redlock 5 nodes", five)] {
            if let Some(rs) = get(scenario, "rslock") {
                out.push(Check {
                    name: "S6".into(),
                    target: format!("{}: pairs/s >= rslock", &scenario[11..]),
                    measured: format!(
                        "{:.0}/s vs rslock {:.0}/s = {:.2} x",
                        lh.ops_per_s,
                        rs.ops_per_s,
                        lh.ops_per_s / rs.ops_per_s
                    ),
                    pass: Some(lh.ops_per_s >= rs.ops_per_s),
                });
            }
        }
    }

    if let Some(lh) = get("S7 renewal", "leasehold") {
        let leases = lh.get_f64("leases_taken").unwrap_or(f64::NAN);
        let per = lh.get_f64("commands_per_period").unwrap_or(f64::NAN);
        let held = matches!(lh.get("all_held"), Some(report::Value::B(true)));
        out.push(Check {
            name: "S7".into(),
            target: "<= 1 script call per 100 leases per period, all held".into(),
            measured: format!(
                "{per:.1} EVALSHA per period for {leases:.0} leases (limit {:.0}), all held = {held}",
                leases / 100.0
            ),
            pass: Some(per <= leases / 100.0 && held),
        });
        let others = peers("S7 renewal");
        let best_rate = others
            .iter()
            .max_by(|a, b| a.ops_per_s.total_cmp(&b.ops_per_s));
        if let Some(best) = best_rate {
            out.push(Check {
                name: "S7".into(),
                target: "taking the leases: acquisitions/s >= best peer".into(),
                measured: format!(
                    "{:.0}/s vs {} {:.0}/s = {:.2} x",
                    lh.ops_per_s,
                    best.imp,
                    best.ops_per_s,
                    lh.ops_per_s / best.ops_per_s
                ),
                pass: Some(lh.ops_per_s >= best.ops_per_s),
            });
        }
        let heap = |r: &Record| r.get_f64("heap_bytes_per_lease").unwrap_or(f64::NAN);
        let least = others.iter().min_by(|a, b| heap(a).total_cmp(&heap(b)));
        if let Some(least) = least {
            let all: Vec<String> = others
                .iter()
                .map(|p| format!("{} {:.0} B", p.imp, heap(p)))
                .collect();
            out.push(Check {
                name: "S7".into(),
                target: "client heap per held lease <= best peer".into(),
                measured: format!(
                    "{:.0} B (resident {:.0} B); peers: {}",
                    heap(lh),
                    lh.get_f64("rss_bytes_per_lease").unwrap_or(f64::NAN),
                    all.join(", ")
                ),
                pass: Some(heap(lh) <= heap(least)),
            });
        }
    }

    family_checks(rows, &mut out);

    let s8 = market::scenario_name(5, 5);
    if let (Some(item), Some(watch)) = (
        get(&s8, market::impl_name(Variant::ItemLock)),
        get(&s8, market::impl_name(Variant::Watch)),
    ) {
        let retries = item.get_f64("retries_per_purchase").unwrap_or(f64::NAN);
        let ratio = item.ops_per_s / watch.ops_per_s;
        out.push(Check {
            name: "S8".into(),
            target: "5x5: item locks >= 5 x WATCH purchases/s, 0 retries".into(),
            measured: format!(
                "{:.0}/s vs {:.0}/s = {ratio:.1} x; retries {retries:.2} (WATCH {:.2})",
                item.ops_per_s,
                watch.ops_per_s,
                watch.get_f64("retries_per_purchase").unwrap_or(f64::NAN)
            ),
            pass: Some(ratio >= 5.0 && retries == 0.0),
        });
    }
    out
}

/// S9's targets: a free permit and a free read share cost Redis at most
/// 1.5 x what a free plain lock costs; nobody starves on a busy semaphore
/// or rw lock, and neither grants more than it may.
fn family_checks(rows: &[Row], out: &mut Vec<Check>) {
    let get = |imp: &str| report::find(rows, family::FREE, imp);
    let cpu = |r: &Record| r.get_f64("server_us_per_pair").unwrap_or(f64::NAN);
    if let Some(lock) = get("leasehold lock") {
        for imp in ["leasehold permit", "leasehold read"] {
            if let Some(r) = get(imp) {
                let ratio = cpu(r) / cpu(lock);
                out.push(Check {
                    name: "S9".into(),
                    target: format!("free {}: Redis CPU <= 1.5 x a free lock's", &imp[10..]),
                    measured: format!(
                        "{:.1} us vs {:.1} us = {ratio:.2} x; pairs/s {:.2} x",
                        cpu(r),
                        cpu(lock),
                        r.ops_per_s / lock.ops_per_s
                    ),
                    pass: Some(ratio <= 1.5),
                });
            }
        }
    }
    let int = |r: &Record, k: &str| r.get_f64(k).unwrap_or(0.0);
    if let Some(sem) = report::find(rows, family::SEMAPHORE, "leasehold") {
        let (min, max) = (
            int(sem, "min_grants_per_task"),
            int(sem, "max_grants_per_task"),
        );
        let exact = matches!(sem.get("exact"), Some(report::Value::B(true)));
        let peak = int(sem, "peak_holders");
        out.push(Check {
            name: "S9".into(),
            target: format!("semaphore: fewest >= most / 4, <= {} holders", family::PERMITS),
            measured: format!(
                "{:.0} grants/s; fewest {min:.0}, most {max:.0} per task; peak {peak:.0} holders, exact = {exact}{}",
                sem.ops_per_s,
                peers_text(rows, family::SEMAPHORE, sem.ops_per_s)
            ),
            pass: Some(min * 4.0 >= max && exact),
        });
    }
    if let Some(rw) = report::find(rows, family::RW, "leasehold") {
        let exact = matches!(rw.get("exact"), Some(report::Value::B(true)));
        let fair = ["reader", "writer"].iter().all(|role| {
            int(rw, &format!("min_grants_per_{role}")) * 4.0
                >= int(rw, &format!("max_grants_per_{role}"))
        });
        let peer = peers_text(rows, family::RW, rw.ops_per_s);
        out.push(Check {
            name: "S9".into(),
            target: "rw mixed: per role fewest >= most / 4, exclusive".into(),
            measured: format!(
                "{:.0} grants/s (writers {:.0}/s); readers {:.0}-{:.0}, writers {:.0}-{:.0} per task; exact = {exact}{peer}",
                rw.ops_per_s,
                int(rw, "writer_grants_per_s"),
                int(rw, "min_grants_per_reader"),
                int(rw, "max_grants_per_reader"),
                int(rw, "min_grants_per_writer"),
                int(rw, "max_grants_per_writer"),
            ),
            pass: Some(fair && exact),
        });
    }
}

/// `; peer N/s (leasehold M x)` for each peer measured in `scenario`.
fn peers_text(rows: &[Row], scenario: &str, leasehold: f64) -> String {
    report::PEERS
        .iter()
        .filter_map(|p| report::find(rows, scenario, p))
        .map(|p| {
            format!(
                "; {} {:.0}/s (leasehold {:.1} x)",
                p.imp,
                p.ops_per_s,
                leasehold / p.ops_per_s
            )
        })
        .collect()
}

/// S10: the layer's requests/s and allocations per request against the
/// same handler taking the lock by hand.
fn layer_text(rows: &[Row]) -> String {
    let get = |imp: &str| report::find(rows, "S10 tower layer", imp);
    let mut out =
        String::from("\nThe tower layer (S10: axum through oneshot, 64 tasks, fresh keys)\n");
    match (get("leasehold layer"), get("leasehold by hand")) {
        (Some(layer), Some(hand)) => {
            let allocs = |r: &Record| {
                r.get_f64("allocs_per_request")
                    .map_or_else(|| "?".to_owned(), |a| format!("{a:.1}"))
            };
            let _ = writeln!(
                out,
                "  layer {:.0} req/s, by hand {:.0} req/s: x {:.3}; allocations per request {} vs {}",
                layer.ops_per_s,
                hand.ops_per_s,
                layer.ops_per_s / hand.ops_per_s,
                allocs(layer),
                allocs(hand)
            );
        }
        _ => out.push_str("  not measured (needs S10 with leasehold)\n"),
    }
    out
}
