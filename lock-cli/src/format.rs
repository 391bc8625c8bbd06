//! How locks are shown: a table, a detail view, one watch line, JSON.

use std::time::Duration;

use leasehold::{Holder, LockInfo, LockKind};

/// The JSON object of one lock: `key`, `holder`, `ttl_ms`, `fencing_token`,
/// `waiters`, `kind` (`lock`, `semaphore`, `read`, `write`) and `holders`
/// (each with `holder`, `ttl_ms`, `fencing_token`).
pub fn info_json(info: &LockInfo) -> serde_json::Value {
    let holders: Vec<serde_json::Value> = info
        .holders
        .iter()
        .map(|h| {
            serde_json::json!({
                "holder": h.holder,
                "ttl_ms": u64::try_from(h.ttl.as_millis()).unwrap_or(u64::MAX),
                "fencing_token": h.fencing_token,
            })
        })
        .collect();
    serde_json::json!({
        "key": info.key,
        "holder": info.holder,
        "ttl_ms": u64::try_from(info.ttl.as_millis()).unwrap_or(u64::MAX),
        "fencing_token": info.fencing_token,
        "waiters": info.waiters,
        "kind": kind(info),
        "holders": holders,
    })
}

/// `lock`, `semaphore`, `read`, `write` or `election`.
pub fn kind(info: &LockInfo) -> &'static str {
    match info.kind {
        LockKind::Semaphore => "semaphore",
        LockKind::Read => "read",
        LockKind::Write => "write",
        LockKind::Election => "election",
        _ => "lock",
    }
}

/// The key column: the key, and for an election (whose name is its own
/// namespace, apart from a lock of the same key) a mark that says so.
fn key_cell(info: &LockInfo) -> String {
    match info.kind {
        LockKind::Election => format!("{} (election)", info.key),
        _ => info.key.clone(),
    }
}

/// The holder column: the name, and how many more hold it (a semaphore's
/// permits, read shares).
fn holder_cell(info: &LockInfo) -> String {
    match info.holders.len() {
        0 | 1 => info.holder.clone(),
        n => format!("{} (+{} more)", info.holder, n - 1),
    }
}

/// `12.3s`, `4m 05s`, `2h 00m`.
pub fn ttl(ttl: Duration) -> String {
    let secs = ttl.as_secs();
    if secs >= 3600 {
        format!("{}h {:02}m", secs / 3600, secs % 3600 / 60)
    } else if secs >= 60 {
        format!("{}m {:02}s", secs / 60, secs % 60)
    } else {
        format!("{:.1}s", ttl.as_secs_f64())
    }
}

/// Columns KEY, HOLDER, TTL, FENCING TOKEN, WAITERS, aligned.
pub fn table(infos: &[LockInfo]) -> String {
    let header = ["KEY", "HOLDER", "TTL", "FENCING TOKEN", "WAITERS"];
    let rows: Vec<[String; 5]> = infos
        .iter()
        .map(|info| {
            [
                key_cell(info),
                holder_cell(info),
                ttl(info.ttl),
                info.fencing_token.to_string(),
                info.waiters.to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut push_row = |cells: [&str; 5]| {
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i == cells.len() - 1 {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  "));
            }
        }
        out.push('\n');
    };
    push_row(header);
    for row in &rows {
        push_row([&row[0], &row[1], &row[2], &row[3], &row[4]].map(String::as_str));
    }
    out
}

/// The detail view of `show`; a semaphore or rw lock also shows its kind
/// and every holder.
pub fn info_text(info: &LockInfo) -> String {
    let mut text = format!(
        "key:            {}\nholder:         {}\nttl:            {}\nfencing token:  {}\nwaiters:        {}\n",
        info.key,
        info.holder,
        ttl(info.ttl),
        info.fencing_token,
        info.waiters
    );
    if info.kind != LockKind::Lock {
        text.push_str(&format!("kind:           {}\n", kind(info)));
        for h in &info.holders {
            text.push_str(&holder_line(h));
            text.push('\n');
        }
    }
    text
}

/// One holder of a semaphore or rw lock, indented under its key.
fn holder_line(h: &Holder) -> String {
    format!(
        "  held by {}  ttl {}  fencing token {}",
        h.holder,
        ttl(h.ttl),
        h.fencing_token
    )
}

/// One refresh of `watch`: a line for a lock, writer or election; for a
/// semaphore's permits or read shares, a line for the key and one per
/// holder, so that every permit in use shows.
pub fn watch_line(info: &LockInfo) -> String {
    match info.kind {
        LockKind::Semaphore | LockKind::Read => {
            let mut text = format!(
                "{}  {}  {} held  waiters {}",
                key_cell(info),
                kind(info),
                info.holders.len(),
                info.waiters
            );
            for h in &info.holders {
                text.push('\n');
                text.push_str(&holder_line(h));
            }
            text
        }
        _ => format!(
            "{}  held by {}  ttl {}  fencing token {}  waiters {}",
            key_cell(info),
            info.holder,
            ttl(info.ttl),
            info.fencing_token,
            info.waiters
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::ttl;
    use std::time::Duration;

    #[test]
    fn ttls_read_well() {
        assert_eq!(ttl(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(ttl(Duration::from_secs(245)), "4m 05s");
        assert_eq!(ttl(Duration::from_secs(7200)), "2h 00m");
    }
}
