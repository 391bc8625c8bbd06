//! What a server's `INFO` says about its identity: its `run_id` (new at
//! every start of a server process), its uptime, its `maxmemory-policy`,
//! and the native conditional commands its name and version offer.

use std::time::Duration;

use redis::Value;

use crate::backend::scripts::Natives;

/// What `INFO` says that matters here.
#[derive(Debug, Default)]
pub(crate) struct Identity {
    pub(super) run_id: Option<String>,
    pub(super) uptime: Option<Duration>,
    pub(super) policy: Option<String>,
    /// What its name and version say it offers (all nodes of a cluster).
    pub(super) natives: Option<Natives>,
}

/// Whether a `maxmemory-policy` can evict keys that have a TTL.
pub(super) fn evicts(policy: &str) -> bool {
    policy.starts_with("allkeys-") || policy.starts_with("volatile-")
}

impl Identity {
    /// From an `INFO` reply: one server's text, or (Cluster) one per node,
    /// in which case the most restrictive wins.
    pub(crate) fn from_info(info: &Value) -> Identity {
        let mut identity = Identity::default();
        let mut texts = Vec::new();
        collect_texts(info, &mut texts);
        identity.natives = Natives::common(&texts);
        for text in texts {
            for line in text.lines() {
                let Some((field, value)) = line.trim().split_once(':') else {
                    continue;
                };
                match field {
                    "run_id" => identity.run_id = Some(value.to_owned()),
                    "uptime_in_seconds" => {
                        let uptime = value.parse().ok().map(Duration::from_secs);
                        identity.uptime = match (identity.uptime, uptime) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                    }
                    "maxmemory_policy" if identity.policy.as_deref().is_none_or(|p| !evicts(p)) => {
                        identity.policy = Some(value.to_owned());
                    }
                    _ => {}
                }
            }
        }
        identity
    }
}

fn collect_texts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::BulkString(bytes) => out.push(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => out.push(text.clone()),
        Value::VerbatimString { text, .. } => out.push(text.clone()),
        Value::Array(items) | Value::Set(items) => {
            items.iter().for_each(|item| collect_texts(item, out));
        }
        Value::Map(pairs) => pairs.iter().for_each(|(_, v)| collect_texts(v, out)),
        _ => {}
    }
}
