//! A client's settings, as given to its builder: plain data, a leaf module.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::limits::DEFAULT_TTL;

/// The default key prefix: every Redis name leasehold uses starts with it.
pub const DEFAULT_PREFIX: &str = "leasehold:";

static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// How many replicas must acknowledge an acquisition, and how long to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaSync {
    pub(crate) replicas: usize,
    pub(crate) timeout: Duration,
}

impl Default for ReplicaSync {
    fn default() -> Self {
        ReplicaSync {
            replicas: 0,
            timeout: Duration::from_secs(1),
        }
    }
}

/// What every request of one client shares.
#[derive(Debug, Clone)]
pub(crate) struct ClientConfig {
    /// Tells clients apart (re-entry is per client).
    pub(crate) id: u64,
    pub(crate) prefix: String,
    pub(crate) default_ttl: Duration,
    pub(crate) replica_sync: ReplicaSync,
    /// Who holds a lock, as operators see it.
    pub(crate) name: String,
    /// Metrics carry a `key` label (feature `metrics`; off by default).
    pub(crate) metrics_key_label: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            id: 0,
            prefix: DEFAULT_PREFIX.to_owned(),
            default_ttl: DEFAULT_TTL,
            replica_sync: ReplicaSync::default(),
            name: default_name(),
            metrics_key_label: false,
        }
    }
}

impl ClientConfig {
    /// A copy with a fresh client id.
    pub(crate) fn for_new_client(&self) -> ClientConfig {
        ClientConfig {
            id: NEXT_CLIENT.fetch_add(1, Ordering::Relaxed),
            ..self.clone()
        }
    }
}

/// `hostname:pid`.
fn default_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}
