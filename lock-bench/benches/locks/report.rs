//! Results: one [`Row`] per scenario × implementation × repetition, the
//! median of the repetitions, the printed table with ratios, the target
//! checks, and `target/bench/locks.jsonl`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::stats::median_index;

/// A scenario-specific figure.
#[derive(Debug, Clone)]
pub enum Value {
    F(f64),
    I(i64),
    B(bool),
    S(String),
}

impl Value {
    fn json(&self) -> String {
        match self {
            Value::F(f) => json_f64(*f),
            Value::I(i) => i.to_string(),
            Value::B(b) => b.to_string(),
            Value::S(s) => json_str(s),
        }
    }

    fn text(&self) -> String {
        match self {
            Value::F(f) if f.abs() >= 100.0 || *f == 0.0 => format!("{f:.0}"),
            Value::F(f) => format!("{f:.2}"),
            Value::I(i) => i.to_string(),
            Value::B(b) => b.to_string(),
            Value::S(s) => s.clone(),
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::F(f) => Some(*f),
            Value::I(i) => Some(*i as f64),
            Value::B(b) => Some(f64::from(u8::from(*b))),
            Value::S(_) => None,
        }
    }
}

/// One measured run.
#[derive(Debug, Clone)]
pub struct Record {
    pub scenario: String,
    pub imp: String,
    pub ops_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub extra: Vec<(String, Value)>,
}

impl Record {
    pub fn new(scenario: &str, imp: &str, ops_per_s: f64, p50_us: f64, p99_us: f64) -> Record {
        Record {
            scenario: scenario.to_owned(),
            imp: imp.to_owned(),
            ops_per_s,
            p50_us,
            p99_us,
            extra: Vec::new(),
        }
    }

    pub fn with(mut self, key: &str, value: Value) -> Record {
        self.extra.push((key.to_owned(), value));
        self
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.extra.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }

    fn json(&self, server: &str) -> String {
        let extra: Vec<String> = self
            .extra
            .iter()
            .map(|(k, v)| format!("{}: {}", json_str(k), v.json()))
            .collect();
        format!(
            "{{\"scenario\": {}, \"impl\": {}, \"server\": {}, \"ops_per_s\": {}, \"p50_us\": {}, \"p99_us\": {}, \"extra\": {{{}}}}}",
            json_str(&self.scenario),
            json_str(&self.imp),
            json_str(server),
            json_f64(self.ops_per_s),
            json_f64(self.p50_us),
            json_f64(self.p99_us),
            extra.join(", ")
        )
    }
}

/// The result of one scenario × implementation × repetition.
#[derive(Debug, Clone)]
pub enum Row {
    Ok(Record),
    /// The implementation cannot do this scenario (skipped, not faked).
    Na {
        scenario: String,
        imp: String,
        reason: String,
    },
    Failed {
        scenario: String,
        imp: String,
        error: String,
    },
}

impl Row {
    pub fn na(scenario: &str, imp: &str, reason: &str) -> Row {
        Row::Na {
            scenario: scenario.to_owned(),
            imp: imp.to_owned(),
            reason: reason.to_owned(),
        }
    }

    pub fn failed(scenario: &str, imp: &str, error: impl std::fmt::Display) -> Row {
        Row::Failed {
            scenario: scenario.to_owned(),
            imp: imp.to_owned(),
            error: error.to_string(),
        }
    }

    fn key(&self) -> (&str, &str) {
        match self {
            Row::Ok(r) => (&r.scenario, &r.imp),
            Row::Na { scenario, imp, .. } | Row::Failed { scenario, imp, .. } => (scenario, imp),
        }
    }
}

/// Whether a scenario is ranked by latency (lower is better) rather than rate.
pub fn ranked_by_latency(scenario: &str) -> bool {
    matches!(scenario.split(' ').next(), Some("S4" | "S11"))
}

/// The median repetition of every scenario × implementation, in first-seen
/// order. Boolean correctness figures (`exact`, `consistent`, `all_held`)
/// are the AND over all repetitions, so one bad run is never hidden.
pub fn medians(rows: &[Row]) -> Vec<Row> {
    let mut order: Vec<(String, String)> = Vec::new();
    for row in rows {
        let (s, i) = row.key();
        if !order.iter().any(|(a, b)| a == s && b == i) {
            order.push((s.to_owned(), i.to_owned()));
        }
    }
    order
        .into_iter()
        .map(|(s, i)| {
            let group: Vec<&Row> = rows.iter().filter(|r| r.key() == (&s, &i)).collect();
            if let Some(Row::Failed { .. }) = group.iter().find(|r| matches!(r, Row::Failed { .. }))
            {
                return group
                    .into_iter()
                    .find(|r| matches!(r, Row::Failed { .. }))
                    .cloned()
                    .unwrap_or_else(|| Row::failed(&s, &i, "?"));
            }
            let records: Vec<&Record> = group
                .iter()
                .filter_map(|r| match r {
                    Row::Ok(rec) => Some(rec),
                    _ => None,
                })
                .collect();
            let latency = ranked_by_latency(&s);
            match median_index(&records, |r| if latency { r.p50_us } else { r.ops_per_s }) {
                None => group[0].clone(),
                Some(m) => {
                    let mut chosen = records[m].clone();
                    for (key, value) in chosen.extra.iter_mut() {
                        if let Value::B(_) = value {
                            let all = records
                                .iter()
                                .all(|r| matches!(r.get(key), Some(Value::B(true))));
                            *value = Value::B(all);
                        }
                    }
                    chosen
                        .extra
                        .push(("runs".to_owned(), Value::I(records.len() as i64)));
                    Row::Ok(chosen)
                }
            }
        })
        .collect()
}

/// What each scenario's columns mean.
pub fn describe(scenario: &str) -> &'static str {
    match scenario.split(' ').next().unwrap_or("") {
        "S1" => {
            "1 task, a fresh key per iteration. ops = acquire+release pairs/s; p50/p99 = acquire"
        }
        "S2" => "64 tasks, each its own keys. ops = pairs/s (all tasks); p50/p99 = acquire",
        "S3" => {
            "32 tasks on one key, wait + GET/SET increment. ops = critical sections/s; p50/p99 = handoff wait"
        }
        "S4" => {
            "2 tasks alternate on one key, each holding it 2 ms (busy). ops = handoffs/s; p50/p99 = release start -> waiter holds it"
        }
        "S5" => {
            "nested acquire+release inside a held lock. ops = re-entries/s; p50/p99 = one re-entry"
        }
        "S6" => "1 task, fresh key per iteration, Redlock. ops = pairs/s; p50/p99 = acquire",
        "S7" => {
            "leases (ttl 3 s) kept alive by the library; commands_per_period = EVALSHA per 1 s. ops = acquisitions/s while taking them; p50/p99 = acquire"
        }
        "S8" => "Redis in Action marketplace. ops = purchases/s; p50/p99 = purchase latency",
        "S9" if scenario.contains("free") => {
            "lock family, 64 tasks, each its own fresh keys. ops = acquire+release pairs/s; p50/p99 = acquire"
        }
        "S9" => {
            "lock family, tasks on one key, wait + INCR. ops = grants/s; p50/p99 = wait for a grant"
        }
        "S10" => {
            "axum handler behind the tower layer vs the lock by hand, 64 tasks. ops = requests/s; p50/p99 = request"
        }
        "S11" => {
            "election, a client per candidate. resign: ops = handoffs/s, p50/p99 = resign start -> standby elected; death: leader cut off (ttl 1 s), p50/p99 = cut -> standby elected; standby waiting: its Redis commands/s"
        }
        _ => "",
    }
}

/// The table, with ratios vs raw and vs the best peer.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let mut scenarios: Vec<&str> = Vec::new();
    for row in rows {
        let (s, _) = row.key();
        if !scenarios.contains(&s) {
            scenarios.push(s);
        }
    }
    for scenario in scenarios {
        let group: Vec<&Row> = rows.iter().filter(|r| r.key().0 == scenario).collect();
        let latency = ranked_by_latency(scenario);
        let metric = |r: &Record| if latency { r.p50_us } else { r.ops_per_s };
        let ok = |imp: &str| {
            group.iter().find_map(|r| match r {
                Row::Ok(rec) if rec.imp == imp => Some(rec.clone()),
                _ => None,
            })
        };
        let raw = ok("raw");
        let best_peer = group
            .iter()
            .filter_map(|r| match r {
                Row::Ok(rec) if is_peer_name(&rec.imp) && metric(rec).is_finite() => Some(rec),
                _ => None,
            })
            .max_by(|a, b| {
                let (x, y) = (metric(a), metric(b));
                if latency {
                    y.total_cmp(&x)
                } else {
                    x.total_cmp(&y)
                }
            });
        let _ = writeln!(out, "\n{scenario}: {}", describe(scenario));
        let _ = writeln!(
            out,
            "  {:<24} {:>11} {:>10} {:>10} {:>7} {:>10}  extra",
            "impl",
            "ops/s",
            "p50 us",
            "p99 us",
            if latency { "p50/raw" } else { "x raw" },
            if latency { "p50/peer" } else { "x peer" },
        );
        for row in &group {
            match row {
                Row::Ok(r) => {
                    let vs_raw = raw
                        .as_ref()
                        .map(|raw| ratio(metric(r), metric(raw)))
                        .unwrap_or_default();
                    let vs_peer = if r.imp.starts_with("leasehold") {
                        best_peer
                            .map(|p| format!("{} ({})", ratio(metric(r), metric(p)), p.imp))
                            .unwrap_or_default()
                    } else {
                        String::new()
                    };
                    let extra: Vec<String> = r
                        .extra
                        .iter()
                        .filter(|(k, _)| k != "runs")
                        .map(|(k, v)| format!("{k}={}", v.text()))
                        .collect();
                    let _ = writeln!(
                        out,
                        "  {:<24} {:>11.0} {:>10.1} {:>10.1} {:>7} {:>10}  {}",
                        r.imp,
                        r.ops_per_s,
                        r.p50_us,
                        r.p99_us,
                        vs_raw,
                        vs_peer,
                        extra.join(" ")
                    );
                }
                Row::Na { imp, reason, .. } => {
                    let _ = writeln!(out, "  {imp:<24} {:>11}  ({reason})", "n/a");
                }
                Row::Failed { imp, error, .. } => {
                    let _ = writeln!(out, "  {imp:<24} {:>11}  ({error})", "FAILED");
                }
            }
        }
    }
    out
}

/// The peer crates measured, by implementation name.
pub const PEERS: [&str; 5] = [
    "rslock",
    "rlock",
    "async-redis-lock",
    "distkit",
    "distributed-lock",
];

/// The measured row of `imp` in `scenario`, if it ran.
pub fn find<'a>(rows: &'a [Row], scenario: &str, imp: &str) -> Option<&'a Record> {
    rows.iter().find_map(|r| match r {
        Row::Ok(rec) if rec.scenario == scenario && rec.imp == imp => Some(rec),
        _ => None,
    })
}

fn is_peer_name(imp: &str) -> bool {
    PEERS
        .iter()
        .any(|p| imp == *p || imp.starts_with(&format!("{p} ")))
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b != 0.0 {
        let r = a / b;
        if r != 0.0 && r.abs() < 0.01 {
            format!("{r:.1e}")
        } else {
            format!("{r:.2}")
        }
    } else {
        String::new()
    }
}

/// One line per record of the median rows, to `path` (directories created),
/// each naming the `server` it ran on (e.g. `valkey 9.1.2`).
pub fn write_jsonl(rows: &[Row], path: &Path, server: &str) -> std::io::Result<usize> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut text = String::new();
    let mut n = 0;
    for row in rows {
        if let Row::Ok(r) = row {
            text.push_str(&r.json(server));
            text.push('\n');
            n += 1;
        }
    }
    std::fs::write(path, text)?;
    Ok(n)
}

/// `<target dir>/bench/locks.jsonl`: the target dir is found from this
/// executable (`<target>/<profile>/deps/locks-<hash>`), or `CARGO_TARGET_DIR`.
pub fn jsonl_path() -> PathBuf {
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        return Path::new(&dir).join("bench").join("locks.jsonl");
    }
    let from_exe = std::env::current_exe().ok().and_then(|exe| {
        let deps = exe.parent()?;
        let profile = deps.parent()?;
        let target = profile.parent()?;
        (deps.file_name()? == "deps").then(|| target.to_path_buf())
    });
    from_exe
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("bench")
        .join("locks.jsonl")
}

fn json_f64(f: f64) -> String {
    if f.is_finite() {
        let s = format!("{f}");
        if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        "null".to_owned()
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A performance target, checked against the median rows.
pub struct Check {
    pub name: String,
    pub target: String,
    pub measured: String,
    /// `None`: not measured in this run.
    pub pass: Option<bool>,
}

pub fn checks_text(checks: &[Check]) -> String {
    let mut out = String::from("\nTargets (leasehold, ratios within this run)\n");
    for c in checks {
        let verdict = match c.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "----",
        };
        let _ = writeln!(
            out,
            "  [{verdict}] {:<4} {:<46} measured: {}",
            c.name, c.target, c.measured
        );
    }
    out
}
