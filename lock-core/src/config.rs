//! A client's settings, as given to its builder: plain data, a leaf module.
//!
//! [`Settings`] holds them in three parts, by who reads them: the requests
//! ([`ClientSettings`]), the connections ([`ConnectSettings`]) and each
//! server's gate ([`GateSettings`]). A request's own settings (its lease)
//! are `LeaseSettings`, in `lease.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::limits::{DEFAULT_PLACE_LIFE, DEFAULT_TTL};

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

/// Everything a client's builder was told.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    pub(crate) client: ClientSettings,
    pub(crate) connect: ConnectSettings,
    pub(crate) gate: GateSettings,
}

/// What every request of one client shares.
#[derive(Debug, Clone)]
pub(crate) struct ClientSettings {
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

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            id: 0,
            prefix: DEFAULT_PREFIX.to_owned(),
            default_ttl: DEFAULT_TTL,
            replica_sync: ReplicaSync::default(),
            name: default_name(),
            metrics_key_label: false,
        }
    }
}

impl ClientSettings {
    /// A copy with a fresh client id.
    pub(crate) fn for_new_client(&self) -> ClientSettings {
        ClientSettings {
            id: NEXT_CLIENT.fetch_add(1, Ordering::Relaxed),
            ..self.clone()
        }
    }
}

/// Timeouts and retries of Redis connections.
#[derive(Debug, Clone)]
pub(crate) struct ConnectSettings {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) reconnect_retries: usize,
    /// Custom trust anchors and client certificate for `rediss://` (`None`:
    /// the webpki root certificates, no client certificate).
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<redis::TlsCertificates>,
}

impl Default for ConnectSettings {
    fn default() -> Self {
        ConnectSettings {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            reconnect_retries: 2,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

impl ConnectSettings {
    /// The custom TLS certificates, made empty at first use.
    #[cfg(feature = "tls")]
    pub(crate) fn tls_certificates(&mut self) -> &mut redis::TlsCertificates {
        self.tls.get_or_insert(redis::TlsCertificates {
            client_tls: None,
            root_cert: None,
        })
    }
}

/// What each server's backend was told: eviction, restarts, the commands
/// it may use, and how long waiters' places live.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GateSettings {
    pub(crate) restart_grace: Duration,
    pub(crate) allow_eviction: bool,
    /// Never use the server's native conditional commands: every
    /// operation is its Lua script (`native_commands(false)`).
    pub(crate) lua_only: bool,
    /// How long a waiter's place outlives its client's last keep-alive,
    /// and the longest lease a release hands a waiter (`place_life`).
    pub(crate) place_life: Duration,
}

impl Default for GateSettings {
    fn default() -> Self {
        GateSettings {
            restart_grace: Duration::ZERO,
            allow_eviction: false,
            lua_only: false,
            place_life: DEFAULT_PLACE_LIFE,
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
