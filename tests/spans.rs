//! The documented `tracing` spans and events (`leasehold::observability`),
//! captured by a small subscriber while the fault kit's client acquires,
//! finds a lock busy, waits for a handoff, releases, renews, and loses
//! leases (stolen, server restarted). Runs on a current-thread runtime with
//! the subscriber as the thread's default, so the watchdog's task is
//! captured too.

use std::collections::HashMap;
use std::fmt::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::testing::FaultyClient;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// A span as captured: its name and every field recorded on it.
#[derive(Debug, Clone)]
struct SpanRecord {
    name: &'static str,
    fields: HashMap<String, String>,
}

/// An event as captured: level, message and fields.
#[derive(Debug, Clone)]
struct EventRecord {
    level: Level,
    message: String,
    fields: HashMap<String, String>,
}

#[derive(Default)]
struct Captured {
    spans: Vec<SpanRecord>,
    events: Vec<EventRecord>,
}

#[derive(Clone, Default)]
struct Capture {
    captured: Arc<Mutex<Captured>>,
    next_id: Arc<AtomicU64>,
}

impl Capture {
    fn with<T>(&self, f: impl FnOnce(&mut Captured) -> T) -> T {
        f(&mut self.captured.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The spans named `name`, in creation order.
    fn spans(&self, name: &str) -> Vec<SpanRecord> {
        self.with(|c| c.spans.iter().filter(|s| s.name == name).cloned().collect())
    }

    /// The events whose message starts with `message`.
    fn events(&self, message: &str) -> Vec<EventRecord> {
        self.with(|c| {
            c.events
                .iter()
                .filter(|e| e.message.starts_with(message))
                .cloned()
                .collect()
        })
    }

    fn clear(&self) {
        self.with(|c| {
            c.spans.clear();
            c.events.clear();
        });
    }
}

struct Fields<'a> {
    fields: &'a mut HashMap<String, String>,
    message: Option<&'a mut String>,
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.fields
            .insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            if let Some(message) = self.message.as_deref_mut() {
                let _ = write!(message, "{value:?}");
            }
            return;
        }
        self.fields
            .insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("leasehold")
    }

    fn new_span(&self, attributes: &Attributes<'_>) -> Id {
        let mut fields = HashMap::new();
        attributes.record(&mut Fields {
            fields: &mut fields,
            message: None,
        });
        let id = self.with(|c| {
            c.spans.push(SpanRecord {
                name: attributes.metadata().name(),
                fields,
            });
            c.spans.len() as u64
        });
        self.next_id.store(id, Ordering::Relaxed);
        Id::from_u64(id)
    }

    fn record(&self, id: &Id, values: &Record<'_>) {
        self.with(|c| {
            if let Some(span) = c.spans.get_mut(id.into_u64() as usize - 1) {
                values.record(&mut Fields {
                    fields: &mut span.fields,
                    message: None,
                });
            }
        });
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = HashMap::new();
        let mut message = String::new();
        event.record(&mut Fields {
            fields: &mut fields,
            message: Some(&mut message),
        });
        self.with(|c| {
            c.events.push(EventRecord {
                level: *event.metadata().level(),
                message,
                fields,
            })
        });
    }

    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn field<'a>(fields: &'a HashMap<String, String>, name: &str) -> &'a str {
    fields.get(name).map_or("<missing>", String::as_str)
}

#[tokio::test(start_paused = true)]
async fn documented_spans_and_events() {
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(capture.clone());
    let kit = FaultyClient::new();
    let theirs = kit.controls.another_client();

    // Acquire, busy, a waiter handed the lock by the release, release.
    let held = kit.client.lock("order:1").acquire().await.unwrap();
    assert!(
        theirs
            .lock("order:1")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let waiter = tokio::spawn({
        let theirs = theirs.clone();
        async move {
            theirs
                .lock("order:1")
                .wait(Duration::from_secs(5))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();

    let acquires = capture.spans("leasehold.acquire");
    assert_eq!(acquires.len(), 3, "{acquires:#?}");
    let [mine, busy, handed] = [&acquires[0], &acquires[1], &acquires[2]].map(|s| &s.fields);
    assert_eq!(field(mine, "key"), "order:1");
    assert_eq!(field(mine, "wait_ms"), "0");
    assert_eq!(field(mine, "ttl_ms"), "30000");
    assert_eq!(field(mine, "attempts"), "1");
    assert_eq!(field(mine, "outcome"), "acquired");
    assert!(mine.contains_key("fencing_token"));
    assert_eq!(field(busy, "outcome"), "busy");
    assert_eq!(field(handed, "wait_ms"), "5000");
    assert_eq!(field(handed, "outcome"), "acquired");
    assert_eq!(field(handed, "waited_ms"), "100");
    assert!(field(handed, "attempts").parse::<u32>().unwrap() >= 2);

    let busy = capture.events("leasehold: lock busy");
    assert_eq!(busy.len(), 1);
    assert_eq!(busy[0].level, Level::DEBUG);
    assert_eq!(field(&busy[0].fields, "key"), "order:1");
    let handoff = capture.events("leasehold: lock handed off");
    assert_eq!(handoff.len(), 1);
    assert_eq!(handoff[0].level, Level::DEBUG);
    assert_eq!(field(&handoff[0].fields, "waited_ms"), "100");

    let releases = capture.spans("leasehold.release");
    assert_eq!(releases.len(), 2);
    for release in &releases {
        assert_eq!(field(&release.fields, "key"), "order:1");
        assert_eq!(field(&release.fields, "outcome"), "released");
    }

    // Renewals, then the lease is stolen: refused, lost.
    capture.clear();
    let renewed = kit
        .client
        .lock("job")
        .ttl(Duration::from_secs(3))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(kit.controls.steal("job"));
    renewed.lost().await;
    let renewals = capture.spans("leasehold.renew");
    assert_eq!(renewals.len(), 3, "{renewals:#?}");
    assert_eq!(field(&renewals[0].fields, "size"), "1");
    assert_eq!(field(&renewals[0].fields, "audit"), "none");
    assert_eq!(field(&renewals[0].fields, "renewed"), "1");
    assert_eq!(field(&renewals[0].fields, "outcome"), "done");
    assert_eq!(field(&renewals[2].fields, "refused"), "1");
    let refused = capture.events("leasehold: renewal refused");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].level, Level::WARN);
    assert_eq!(field(&refused[0].fields, "key"), "job");
    assert_eq!(field(&refused[0].fields, "cause"), "refused");
    let lost = capture.events("leasehold: lease lost");
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].level, Level::WARN);
    assert_eq!(field(&lost[0].fields, "cause"), "refused");
    assert_eq!(
        field(&lost[0].fields, "fencing_token"),
        renewed.fencing_token().to_string()
    );
    let released = renewed.release().await;
    assert!(released.is_err());
    let releases = capture.spans("leasehold.release");
    assert_eq!(field(&releases[0].fields, "outcome"), "not_held");

    // The server restarts: the check finds the lease gone.
    capture.clear();
    let guard = kit.client.lock("report").acquire().await.unwrap();
    kit.controls.restart();
    guard.lost().await;
    let audits = capture.spans("leasehold.renew");
    assert_eq!(audits.len(), 1, "{audits:#?}");
    assert_eq!(field(&audits[0].fields, "audit"), "restarted");
    let gone = capture.events("leasehold: lease not found after a server change");
    assert_eq!(gone.len(), 1);
    assert_eq!(field(&gone[0].fields, "cause"), "restarted");
    let lost = capture.events("leasehold: lease lost");
    assert_eq!(field(&lost[0].fields, "cause"), "restarted");

    // Redis unavailable: an acquisition fails with an `error` outcome.
    capture.clear();
    kit.controls.set_unavailable(true);
    assert!(kit.client.lock("order:2").acquire().await.is_err());
    let failed = capture.spans("leasehold.acquire");
    assert_eq!(field(&failed[0].fields, "outcome"), "error");
}
