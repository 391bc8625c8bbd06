//! The run loop: every selected scenario, each implementation in turn, on
//! the bench's own server, into rows of the report.

use marketplace::Variant;

use crate::adapters::{Kind, Shape};
use crate::cli::Args;
use crate::report::Row;
use crate::scenarios::{
    Ctx, contention, election, family, layer, market, reentry, renewal, throughput,
};

pub(crate) async fn run_all(ctx: &Ctx, args: &Args, selected: &dyn Fn(&str) -> bool) -> Vec<Row> {
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
            if kinds.contains(&Kind::Leasehold) {
                let mut shapes = [Shape::All(2), Shape::Lock];
                shapes.rotate_left(rep % 2);
                for shape in shapes {
                    log(family::lock_all_busy(ctx, shape, rep).await, &mut rows);
                }
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
    if selected("S11") && kinds.contains(&Kind::Leasehold) {
        for rep in 0..reps {
            let mut variants = election::Variant::ALL;
            let n = variants.len();
            variants.rotate_left(rep % n);
            for variant in variants {
                flush();
                log(election::s11(ctx, variant, rep).await, &mut rows);
            }
        }
        flush();
    }
    rows
}
