//! What the rows say: the targets each scenario is held to (PASS/MISS),
//! and the summary lines printed under the tables.

use std::fmt::Write as _;

use marketplace::Variant;

use crate::report::{self, Check, Record, Row};
use crate::scenarios::{family, market};

/// S9's free rows as ratios to leasehold's free plain lock: pairs/s, and
/// Redis CPU per pair (what the target "a free permit or read share costs
/// about what a free lock costs" is about).
pub(crate) fn family_text(rows: &[Row]) -> String {
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
pub(crate) fn floor_text(rows: &[Row]) -> String {
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
pub(crate) fn checks(rows: &[Row]) -> Vec<Check> {
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
pub(crate) fn family_checks(rows: &[Row], out: &mut Vec<Check>) {
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
    if let (Some(all), Some(lock)) = (
        report::find(rows, family::ALL_BUSY, "leasehold lock_all 2"),
        report::find(rows, family::ALL_BUSY, "leasehold lock"),
    ) {
        let exact = matches!(all.get("exact"), Some(report::Value::B(true)));
        let (min, max) = (
            int(all, "min_grants_per_task"),
            int(all, "max_grants_per_task"),
        );
        let per = |r: &Record, k: &str| r.get_f64(k).unwrap_or(f64::NAN);
        out.push(Check {
            name: "S9".into(),
            target: "busy lock_all 2: fewest >= most / 4, exclusive (calls per grant vs a busy lock's)".into(),
            measured: format!(
                "{:.0} grants/s = {:.2} x a busy lock's; {:.1} calls and {:.0} us Redis CPU per grant vs {:.1} and {:.0}; fewest {min:.0}, most {max:.0} per task; exact = {exact}",
                all.ops_per_s,
                all.ops_per_s / lock.ops_per_s,
                per(all, "calls_per_grant"),
                per(all, "server_us_per_grant"),
                per(lock, "calls_per_grant"),
                per(lock, "server_us_per_grant"),
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
pub(crate) fn peers_text(rows: &[Row], scenario: &str, leasehold: f64) -> String {
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
/// same handler taking the lock by hand. The ratio is the median of each
/// repetition's own ratio (the two variants run back to back), which a
/// machine whose load drifts between repetitions disturbs far less than a
/// ratio of two medians.
pub(crate) fn layer_text(all: &[Row], rows: &[Row]) -> String {
    let get = |imp: &str| report::find(rows, "S10 tower layer", imp);
    let s10: Vec<&Record> = all
        .iter()
        .filter_map(|row| match row {
            Row::Ok(record) if record.scenario == "S10 tower layer" => Some(record),
            _ => None,
        })
        .collect();
    let mut paired: Vec<f64> = s10
        .chunks_exact(2)
        .filter_map(|pair| {
            let ops = |name: &str| pair.iter().find(|r| r.imp == name).map(|r| r.ops_per_s);
            Some(ops("leasehold layer")? / ops("leasehold by hand")?)
        })
        .collect();
    paired.sort_by(f64::total_cmp);
    let mut out =
        String::from("\nThe tower layer (S10: axum through oneshot, 64 tasks, fresh keys)\n");
    match (get("leasehold layer"), get("leasehold by hand")) {
        (Some(layer), Some(hand)) => {
            let allocs = |r: &Record| {
                r.get_f64("allocs_per_request")
                    .map_or_else(|| "?".to_owned(), |a| format!("{a:.1}"))
            };
            let ratio = paired
                .get(paired.len().saturating_sub(1) / 2)
                .copied()
                .unwrap_or(layer.ops_per_s / hand.ops_per_s);
            let each: Vec<String> = paired.iter().map(|r| format!("{r:.2}")).collect();
            let _ = writeln!(
                out,
                "  layer {:.0} req/s, by hand {:.0} req/s (medians): x {:.3} (median of the \
                 repetitions' own ratios: {}); allocations per request {} vs {}",
                layer.ops_per_s,
                hand.ops_per_s,
                ratio,
                each.join(", "),
                allocs(layer),
                allocs(hand)
            );
        }
        _ => out.push_str("  not measured (needs S10 with leasehold)\n"),
    }
    out
}
