//! The Grafana dashboard `docs/grafana/leasehold.json` queries only what
//! leasehold emits, as `examples/metrics_prometheus.rs` exports it.
//!
//! The example's Prometheus recorder (its bucket bounds included) is
//! installed, a workload makes every metric of the library move (acquire,
//! busy, a wait handed off by a release, release, a lease that expires, one
//! whose renewal is refused, releases of both), and the exposition it renders
//! is the truth: each metric name in each `expr` of the dashboard must be a
//! series there (`_bucket`, `_sum` and `_count` exist only for histograms
//! given buckets), and each label it selects or groups by must be a label of
//! that series. The other way round, each metric family exposed must appear
//! in some panel.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use leasehold::LockError;
use leasehold::testing::FaultyClient;

#[allow(dead_code)]
#[path = "../examples/metrics_prometheus.rs"]
mod example;

const DASHBOARD: &str = include_str!("../docs/grafana/leasehold.json");

/// Labels that Prometheus adds when it scrapes, and `le` of histogram buckets.
const SCRAPE_LABELS: [&str; 3] = ["job", "instance", "le"];

/// Makes every metric of leasehold record at least once.
async fn workload() {
    let kit = FaultyClient::new();
    let mine = &kit.client;
    let theirs = kit.controls.another_client();

    // Acquired; busy for another owner; a third waits and gets it by handoff.
    let held = mine.lock("d:first").acquire().await.unwrap();
    assert!(
        theirs
            .lock("d:first")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let waiting = tokio::spawn({
        let theirs = theirs.clone();
        async move {
            theirs
                .lock("d:first")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();

    // A lease that expires, then is released: lost (expired), an error.
    let short = mine
        .lock("d:expiring")
        .ttl(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap();
    short.lost().await;
    assert!(matches!(
        short.release().await,
        Err(LockError::NotHeld { .. })
    ));

    // A renewed lease taken away: its renewal is refused, it is lost.
    let renewed = mine
        .lock("d:stolen")
        .ttl(Duration::from_secs(1))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    assert!(kit.controls.steal("d:stolen"));
    tokio::time::timeout(Duration::from_secs(5), renewed.lost())
        .await
        .expect("lost at the next renewal");
    drop(renewed);
}

/// The series of a Prometheus text exposition: name -> its label names.
fn exposed_series(exposition: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in exposition.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = series.entry(line[..name_end].to_owned()).or_default();
        if line[name_end..].starts_with('{') {
            let body = &line[name_end + 1..line.rfind('}').expect("a closing brace")];
            labels.extend(label_names(body));
        }
    }
    series
}

/// The metric families of the exposition (`# TYPE name kind`).
fn exposed_families(exposition: &str) -> Vec<String> {
    exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split(' ').next())
        .map(str::to_owned)
        .collect()
}

/// The label names of a matcher list: `a="x",b=~"y|z"` (also without
/// quotes in values that have no comma).
fn label_names(body: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = body;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if rest.is_empty() {
            return names;
        }
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        names.push(rest[..name_len].to_owned());
        rest = &rest[name_len..];
        // Skip the operator and the value (quoted, possibly with commas).
        match rest.find('"') {
            Some(open) => {
                let after = &rest[open + 1..];
                let close = after.find('"').expect("a closing quote");
                rest = &after[close + 1..];
            }
            None => rest = rest.find(',').map_or("", |comma| &rest[comma..]),
        }
    }
}

/// Every string under an `expr` key of the dashboard.
fn exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", serde_json::Value::String(expr)) => out.push(expr.clone()),
                    _ => exprs(value, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|item| exprs(item, out)),
        _ => {}
    }
}

/// What a PromQL expression uses: each metric with the labels its selector
/// names, and the labels of every `by (...)`.
struct Uses {
    metrics: Vec<(String, Vec<String>)>,
    grouped_by: Vec<String>,
}

fn uses(expr: &str) -> Uses {
    let mut uses = Uses {
        metrics: Vec::new(),
        grouped_by: Vec::new(),
    };
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i] as char;
        if c == '"' {
            // A string (a label value): skip it.
            i += 1 + expr[i + 1..].find('"').expect("a closing quote") + 1;
        } else if c == '[' {
            // A range (`[$__rate_interval]`, `[1h]`): skip it.
            i += expr[i..].find(']').expect("a closing bracket") + 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == '$' {
            let len = expr[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
                .unwrap_or(expr.len() - i);
            let word = &expr[i..i + len];
            i += len;
            let rest = &expr[i..];
            if word.starts_with("leasehold_") {
                let labels = match rest.strip_prefix('{') {
                    Some(body) => {
                        let close = body.find('}').expect("a closing brace");
                        i += close + 2;
                        label_names(&body[..close])
                    }
                    None => Vec::new(),
                };
                uses.metrics.push((word.to_owned(), labels));
            } else if word == "by" {
                let open = rest.find('(').expect("by (...)");
                let close = rest.find(')').expect("by (...)");
                uses.grouped_by.extend(
                    rest[open + 1..close]
                        .split(',')
                        .map(|label| label.trim().to_owned()),
                );
                i += close + 1;
            }
        } else {
            i += 1;
        }
    }
    uses
}

#[test]
fn the_query_parser_sees_metrics_labels_and_groupings() {
    let parsed = uses(
        r#"histogram_quantile(0.99, sum by (le) (rate(leasehold_wait_seconds_bucket{job=~"$job", cause!="a,b"}[$__rate_interval]))) / sum(leasehold_waiters)"#,
    );
    assert_eq!(
        parsed.metrics,
        vec![
            (
                "leasehold_wait_seconds_bucket".to_owned(),
                vec!["job".to_owned(), "cause".to_owned()]
            ),
            ("leasehold_waiters".to_owned(), vec![]),
        ]
    );
    assert_eq!(parsed.grouped_by, vec!["le".to_owned()]);
    assert_eq!(
        exposed_series("# TYPE a counter\na{x=\"1,2\",y=\"\"} 3\nb 4\n"),
        BTreeMap::from([
            (
                "a".to_owned(),
                BTreeSet::from(["x".to_owned(), "y".to_owned()])
            ),
            ("b".to_owned(), BTreeSet::new()),
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_names_what_leasehold_emits() {
    let handle = example::prometheus_builder()
        .expect("the example's buckets")
        .install_recorder()
        .expect("the only recorder of this test binary");
    workload().await;
    handle.run_upkeep();
    let exposition = handle.render();
    let series = exposed_series(&exposition);

    let dashboard: serde_json::Value =
        serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let mut all = Vec::new();
    exprs(&dashboard, &mut all);
    assert!(all.len() >= 10, "{all:?}");

    let mut queried = BTreeSet::new();
    for expr in &all {
        let uses = uses(expr);
        assert!(
            !uses.metrics.is_empty(),
            "queries no leasehold metric: {expr}"
        );
        for (metric, labels) in &uses.metrics {
            let Some(exposed) = series.get(metric) else {
                panic!("`{metric}` in `{expr}` is not emitted; the exposition:\n{exposition}");
            };
            for label in labels.iter().chain(&uses.grouped_by) {
                assert!(
                    SCRAPE_LABELS.contains(&label.as_str()) || exposed.contains(label),
                    "`{expr}` uses label `{label}`, which `{metric}` does not have ({exposed:?})"
                );
            }
            queried.insert(metric.clone());
        }
    }

    // Every family is on the dashboard, and the histograms are histograms
    // (the example gave them buckets), not summaries.
    let families = exposed_families(&exposition);
    assert_eq!(families.len(), 11, "{families:?}\n{exposition}");
    for family in &families {
        assert!(
            queried
                .iter()
                .any(|metric| metric.starts_with(family.as_str())),
            "no panel shows `{family}`"
        );
    }
    for (histogram, _) in example::HISTOGRAM_BUCKETS {
        assert!(
            exposition.contains(&format!("# TYPE {histogram} histogram")),
            "{histogram}:\n{exposition}"
        );
    }
}
