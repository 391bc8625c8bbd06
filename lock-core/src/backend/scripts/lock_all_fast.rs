//! The native free case of `lock_all` (one server, not Cluster): every key
//! free and nobody in any line, taken in one atomic step of plain commands
//! instead of `lock_all.lua` (whose free case costs Redis about four times
//! a free lock's: an `EVALSHA` and the script's own work per key).
//!
//! One round trip, one `MULTI … EXEC` (atomic: nothing runs between its
//! commands):
//!
//! 1. per key, sorted: `SET lock token NX PX ttl GET`: taken (nil), held
//!    (the holder's value, nothing changed), or another type (`WRONGTYPE`,
//!    nothing changed);
//! 2. `MGET` of every fence key: the last fencing tokens, and the line
//!    marker (`+`, `marker.lua`);
//! 3. `EXISTS` of every line: a line without the marker is a semaphore's or
//!    rw lock's (kinds never mix);
//! 4. `TIME`: the server clock.
//!
//! Granted when every `SET` took its key, no fence key is marked or above
//! the clock in µs, and no line exists: nobody waited when the keys were
//! taken, nobody was overtaken. The fencing token of every key is the
//! server clock in µs (above each key's last one), written nowhere, as the
//! plain fast path's (`fast.rs`): the watchdog records it for `inspect`
//! only if the lease is held long enough to be seen (`record.rs`), and the
//! next grant of a key, a `TIME` later, issues a larger one.
//!
//! Anything else but a plain busy reply (every key held by someone else)
//! is not decided here: some keys may be ours while a line may have been
//! overtaken, or a key holds another type. `lock_all.lua` then decides in
//! its claimed mode: it takes the caller's keys back and decides again (a
//! resend after a lost reply, in its resent mode, keeps a key that was
//! the first attempt's grant).
//!
//! A server that refuses the transaction (an ACL rule without `MULTI` and
//! `EXEC`: the commands then ran one by one, or not at all) is also
//! resolved by the script, and the native step is dropped for the rest of
//! the client's life.

use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::call::ScriptError;
use super::fast::Fast;
use super::native::{Natives, Offered};
use crate::backend::connect::{is_retryable, millis};
use crate::backend::keys::AllKeys;

/// Take every key of `all` for `ttl` if all are free and nobody waits in
/// any line, in one `MULTI … EXEC`: [`Fast::Yes`] with one fencing token
/// for every key (not written), [`Fast::Busy`] when every key is held by
/// someone else (nothing changed), otherwise [`Fast::Resolve`] (`None`:
/// the server has no fast path, or refused the transaction before: send
/// `lock_all.lua`).
pub(crate) async fn acquire_all<C: ConnectionLike>(
    con: &mut C,
    offered: &Offered,
    all: &AllKeys,
    token: &str,
    ttl: Duration,
) -> Result<Option<Fast>, ScriptError> {
    if !offered.fast_path() || !offered.get().has(Natives::MULTI_ALL) {
        return Ok(None);
    }
    let n = all.keys.len();
    let mut pipe = redis::Pipeline::with_capacity(n + 3);
    pipe.atomic().ignore_errors();
    let ttl = millis(ttl);
    for keys in &all.keys {
        pipe.cmd("SET")
            .arg(keys.lock())
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl)
            .arg("GET");
    }
    let mget = pipe.cmd("MGET");
    for keys in &all.keys {
        mget.arg(keys.fence());
    }
    let exists = pipe.cmd("EXISTS");
    for keys in &all.keys {
        exists.arg(keys.line());
    }
    pipe.cmd("TIME");
    let replies: Vec<Value> = match pipe.query_async(con).await {
        Ok(replies) => replies,
        Err(e) if is_retryable(&e) => return Err(ScriptError::Redis(e)),
        Err(e) => {
            // The transaction itself was refused (EXECABORT, MULTI not
            // allowed): the script serves from now on, and decides what
            // the commands did if they ran one by one.
            tracing::debug!(error = ?e, "leasehold: the native lock_all was refused; lock_all.lua serves");
            offered.refuse(Natives::MULTI_ALL);
            return Ok(Some(Fast::Resolve));
        }
    };
    Ok(Some(decide(&replies, n, token)))
}

/// The decision on the transaction's replies (`n` keys).
fn decide(replies: &[Value], n: usize, token: &str) -> Fast {
    let (Some(sets), Some([fences, lines, time])) = (replies.get(..n), replies.get(n..)) else {
        return Fast::Resolve;
    };
    let (mut taken, mut busy) = (0, 0);
    for set in sets {
        match set {
            Value::Nil => taken += 1,
            Value::BulkString(holder)
                if holder.strip_prefix(b"+").unwrap_or(holder) != token.as_bytes() =>
            {
                busy += 1;
            }
            // Ours already (a lost reply), another type, anything else.
            _ => return Fast::Resolve,
        }
    }
    if busy == n {
        return Fast::Busy;
    }
    if taken != n || !matches!(lines, Value::Int(0)) {
        return Fast::Resolve;
    }
    let Some(now_us) = super::fast::server_micros(time) else {
        return Fast::Resolve;
    };
    let Value::Array(fences) = fences else {
        return Fast::Resolve;
    };
    if fences.len() != n {
        return Fast::Resolve;
    }
    for fence in fences {
        let last = match fence {
            Value::Nil => 0,
            Value::BulkString(value) => match super::fast::parse_u64(value) {
                Some(last) => last,
                None => return Fast::Resolve,
            },
            _ => return Fast::Resolve,
        };
        if last >= now_us {
            return Fast::Resolve;
        }
    }
    Fast::Yes { fence: now_us }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(us: u64) -> Value {
        Value::Array(vec![
            Value::BulkString((us / 1_000_000).to_string().into_bytes()),
            Value::BulkString((us % 1_000_000).to_string().into_bytes()),
        ])
    }

    fn replies(sets: Vec<Value>, fences: Vec<Value>, lines: i64, now: u64) -> Vec<Value> {
        let mut all = sets;
        all.push(Value::Array(fences));
        all.push(Value::Int(lines));
        all.push(time(now));
        all
    }

    #[test]
    fn every_key_taken_with_no_line_is_granted_at_the_clock() {
        let r = replies(
            vec![Value::Nil, Value::Nil],
            vec![Value::Nil, Value::BulkString(b"17".to_vec())],
            0,
            1_000,
        );
        assert_eq!(decide(&r, 2, "t"), Fast::Yes { fence: 1_000 });
    }

    #[test]
    fn a_line_a_marker_or_a_fence_ahead_is_resolved() {
        let line = replies(
            vec![Value::Nil, Value::Nil],
            vec![Value::Nil, Value::Nil],
            1,
            1_000,
        );
        assert_eq!(decide(&line, 2, "t"), Fast::Resolve);
        let marked = replies(
            vec![Value::Nil, Value::Nil],
            vec![Value::BulkString(b"+5".to_vec()), Value::Nil],
            0,
            1_000,
        );
        assert_eq!(decide(&marked, 2, "t"), Fast::Resolve);
        let ahead = replies(
            vec![Value::Nil, Value::Nil],
            vec![Value::BulkString(b"1000".to_vec()), Value::Nil],
            0,
            1_000,
        );
        assert_eq!(decide(&ahead, 2, "t"), Fast::Resolve);
    }

    #[test]
    fn a_partial_claim_or_our_own_key_is_resolved_and_all_held_is_busy() {
        let other = Value::BulkString(b"someone".to_vec());
        let partial = replies(
            vec![Value::Nil, other.clone()],
            vec![Value::Nil, Value::Nil],
            0,
            9,
        );
        assert_eq!(decide(&partial, 2, "t"), Fast::Resolve);
        let ours = replies(
            vec![Value::BulkString(b"+t".to_vec()), other.clone()],
            vec![Value::Nil, Value::Nil],
            0,
            9,
        );
        assert_eq!(decide(&ours, 2, "t"), Fast::Resolve);
        let busy = replies(
            vec![other.clone(), other],
            vec![Value::Nil, Value::Nil],
            2,
            9,
        );
        assert_eq!(decide(&busy, 2, "t"), Fast::Busy);
        assert_eq!(decide(&[], 2, "t"), Fast::Resolve);
    }
}
