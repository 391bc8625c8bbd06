//! `record.lua`: renew leases taken on the fast path and write their
//! fencing tokens down, for `inspect` (see `fast.rs`).

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::{Lua, ScriptError, evalsha, invoke};
use super::native::Offered;
use crate::backend::connect::millis;
use crate::backend::{FENCE_MEMORY, Owned, Renewal};

/// The script's source as Redis runs it (with the shared helpers first).
pub const SOURCE: &str = concat!(
    include_str!("typed.lua"),
    include_str!("marker.lua"),
    include_str!("record.lua")
);

pub(super) static SCRIPT: Lua = Lua::new(|| redis::Script::new(SOURCE));

/// The most leases one `record.lua` call carries. Leases taken at a high
/// rate fall due for their record together (S7: 10,000 leases taken in
/// about 150 ms came due in batches of a thousand and more); one call for
/// all of them held the single-threaded server for milliseconds, and every
/// acquisition waited behind it (S7's p99 13 ms). Calls of this size leave
/// room between them and keep within one call per 100 leases.
const RECORD_CHUNK: usize = 100;

/// Renew (or check, for a zero TTL) every lease of `batch` and record the
/// fencing token each carries in `record` (the caller sends only such
/// renewals), [`RECORD_CHUNK`] leases per call. One outcome per lease, as
/// `renew.lua` gives them.
///
/// A chunk of checks only (the usual record: a zero TTL) goes without a
/// script where `offered` has the fast path's commands (see
/// [`record_natively`]).
pub(crate) async fn record<C: ConnectionLike>(
    con: &mut C,
    batch: &[&Renewal],
    offered: &Offered,
) -> Result<Vec<Owned>, ScriptError> {
    let native = offered.fast_path();
    let mut out = Vec::with_capacity(batch.len());
    for chunk in batch.chunks(RECORD_CHUNK) {
        let checks_only = chunk.iter().all(|renewal| renewal.ttl.is_zero());
        let done = if native && checks_only {
            record_natively(con, chunk).await?
        } else {
            None
        };
        match done {
            Some(owned) => out.extend(owned),
            None => out.extend(record_chunk(con, chunk).await?),
        }
    }
    Ok(out)
}

/// Check and record a chunk of leases with native commands, pipelined (not
/// atomic, so it holds the server no longer than any other commands): per
/// lease `GET` of its lock key (ours: the token, with or without the line
/// marker) and `SET` of its grant record (`<fence> <owner token>`, living
/// the lease's length plus [`FENCE_MEMORY`], a little longer than
/// `record.lua`'s lease left plus the same).
///
/// The record is written whoever holds the lock: it names its owner, and
/// `inspect.lua` trusts a record only when that owner holds the lock, so a
/// record written for a lease lost meanwhile labels nobody else's. The
/// leases the `GET` did not find ours go to `record.lua` for the exact
/// answer (not ours, another type, released by an operator). `None`: a
/// `SET` was refused (an ACL rule, out of memory): the script serves the
/// chunk and reports it.
async fn record_natively<C: ConnectionLike>(
    con: &mut C,
    chunk: &[&Renewal],
) -> Result<Option<Vec<Owned>>, ScriptError> {
    let mut pipe = redis::Pipeline::with_capacity(chunk.len() * 2);
    pipe.ignore_errors();
    for renewal in chunk {
        let (fence, lease) = renewal.record.unwrap_or_default();
        let lock = renewal.keys.lock();
        let mut read = redis::Cmd::with_capacity(2, 8 + lock.len());
        read.arg("GET").arg(lock);
        let record = renewal.keys.grant_record();
        let mut write = redis::Cmd::with_capacity(5, 64 + record.len() + renewal.token.len());
        write
            .arg("SET")
            .arg(record)
            .arg(format!("{fence} {}", renewal.token))
            .arg("PX")
            .arg(millis(lease + FENCE_MEMORY));
        pipe.add_command(read).add_command(write);
    }
    let replies: Vec<Value> = pipe.query_async(con).await?;
    if replies.len() != chunk.len() * 2
        || replies
            .iter()
            .skip(1)
            .step_by(2)
            .any(|written| matches!(written, Value::ServerError(_)))
    {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(chunk.len());
    let mut unsure = Vec::new();
    for (i, (renewal, read)) in chunk.iter().zip(replies.iter().step_by(2)).enumerate() {
        match read {
            Value::BulkString(holder)
                if holder.strip_prefix(b"+").unwrap_or(holder) == renewal.token.as_bytes() =>
            {
                out.push(Owned::Yes);
            }
            _ => {
                out.push(Owned::No);
                unsure.push(i);
            }
        }
    }
    if !unsure.is_empty() {
        let again: Vec<&Renewal> = unsure.iter().map(|&i| chunk[i]).collect();
        for (&i, owned) in unsure.iter().zip(record_chunk(con, &again).await?) {
            out[i] = owned;
        }
    }
    Ok(Some(out))
}

/// One `record.lua` call for `batch`.
async fn record_chunk<C: ConnectionLike>(
    con: &mut C,
    batch: &[&Renewal],
) -> Result<Vec<Owned>, ScriptError> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let records: Vec<String> = batch.iter().map(|r| r.keys.grant_record()).collect();
    let mut cmd = evalsha(&SCRIPT, batch.len() * 2);
    for (renewal, record) in batch.iter().zip(&records) {
        cmd.arg(renewal.keys.lock()).arg(record);
    }
    for renewal in batch {
        let ttl = if renewal.ttl.is_zero() {
            0
        } else {
            millis(renewal.ttl)
        };
        cmd.arg(&*renewal.token)
            .arg(ttl)
            .arg(renewal.record.map_or(0, |(fence, _)| fence));
    }
    cmd.arg(millis(FENCE_MEMORY));
    let codes: Vec<i64> = invoke(&SCRIPT, &cmd, con).await?;
    Ok(codes.into_iter().map(Owned::from_code).collect())
}
