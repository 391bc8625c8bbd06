//! The fast acquisition: a free lock that nobody waits for, taken with
//! native commands and no script (`SET … NX` is the one atomic step; the
//! fencing token still comes from the server clock, as in the script).
//!
//! One round trip of three commands, pipelined (not `MULTI`):
//!
//! 1. `SET lock token NX PX ttl GET`: the lock is ours (nil), or taken (the
//!    holder's value), or the key holds another type (`WRONGTYPE`, nothing
//!    changed);
//! 2. `GET fence`: the last fencing token a script wrote, and the line
//!    marker (`+`, see `marker.lua`): someone may wait in line;
//! 3. `TIME`: the server clock;
//! 4. `EXISTS line`: a line without the marker is a semaphore's or rw
//!    lock's, whose waiters leave none; the key is theirs while they wait.
//!
//! Taken, unmarked: the fencing token is the server clock in µs, when that
//! is above the last token written (otherwise `acquire.lua` decides, and
//! writes the raised token down, see [`Fast::Resolve`]). Nothing else is
//! written: the token is recorded for `inspect` later, only if the lease is
//! held long enough to be seen (through the watchdog, `record.rs`). This is
//! the whole price of an uncontended acquisition: one `SET` and two reads
//! (COSTS.md: about a tenth of an `EVALSHA` of `acquire.lua`, whose fence
//! key write is what costs).
//!
//! Why no `MULTI`: the commands after the `SET` only read, and what they
//! read cannot change in between in a way that matters. Once the `SET` took
//! the lock, no other acquisition can be granted, so nobody writes the fence
//! key; the marker is only ever taken off by a grant; so a fence key found
//! unmarked after the `SET` was unmarked at it: nobody waited in line when
//! the lock was taken, nobody was overtaken. A marker found may be older
//! than the `SET` or not: either way [`Fast::Resolve`] hands the decision to
//! `acquire.lua` in its *claimed* mode, which gives the lock back to the
//! first in line if there is one (and wakes it if it saw our key).
//!
//! The token never repeats or goes back as long as the server's clock does
//! not step back: two grants of one key are separated, on the server, by a
//! release (or an expiry) and this pipeline's `SET`, so their `TIME`s differ
//! by more than a microsecond, and the last token any script wrote is a
//! floor (Redlock, a line, a clock that was ahead).

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, ServerErrorKind, Value};

use super::call::ScriptError;
use super::native::{Natives, Offered};
use crate::backend::LockKeys;
use crate::backend::connect::{is_retryable, millis};

/// What the fast acquisition found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fast {
    /// Ours, with this fencing token.
    Yes { fence: u64 },
    /// Held by someone else (nothing was changed).
    Busy,
    /// Not decided here: someone may wait in line, a key holds another
    /// type, or the fence key holds something that is not a token. The
    /// lock may be ours from this pipeline's `SET`; `acquire.lua` in its
    /// claimed mode decides (and reports a wrong type).
    Resolve,
}

/// Take the lock for `ttl` if it is free and nobody waits in line, with
/// native commands (a lock already `token`'s, from an attempt whose reply
/// was lost, is [`Fast::Resolve`]: the script recognises it) (`None`: the server does not offer `SET … NX GET`, send
/// `acquire.lua`).
pub(crate) async fn acquire<C: ConnectionLike>(
    con: &mut C,
    offered: &Offered,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
) -> Result<Option<Fast>, ScriptError> {
    if !offered.fast_path() {
        return Ok(None);
    }
    // Every buffer sized from the start: growing them argument by argument
    // cost five allocations per acquisition (the benchmark counts them).
    let lock = keys.lock();
    let mut set = redis::Cmd::with_capacity(7, 40 + lock.len() + token.len());
    set.arg("SET")
        .arg(lock)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(millis(ttl))
        .arg("GET");
    let mut read = redis::Cmd::with_capacity(2, 3 + keys.fence().len());
    read.arg("GET").arg(keys.fence());
    let mut time = redis::Cmd::with_capacity(1, 4);
    time.arg("TIME");
    let mut line = redis::Cmd::with_capacity(2, 6 + keys.line().len());
    line.arg("EXISTS").arg(keys.line());
    let mut pipe = redis::Pipeline::with_capacity(4);
    pipe.ignore_errors();
    pipe.add_command(set)
        .add_command(read)
        .add_command(time)
        .add_command(line);
    let replies: Vec<Value> = pipe.query_async(con).await?;
    let [set, fence, time, line] = replies.as_slice() else {
        return Ok(Some(Fast::Resolve));
    };
    match set {
        Value::Nil => {}
        // Ours already: an earlier attempt got it, its reply was lost.
        Value::BulkString(holder)
            if holder.strip_prefix(b"+").unwrap_or(holder) == token.as_bytes() =>
        {
            return Ok(Some(Fast::Resolve));
        }
        Value::BulkString(_) => return Ok(Some(Fast::Busy)),
        Value::ServerError(error) => {
            let error: redis::RedisError = error.clone().into();
            let refused = match error.kind() {
                ErrorKind::Server(ServerErrorKind::NoPerm) => true,
                ErrorKind::Server(ServerErrorKind::ResponseError) => {
                    !error.to_string().contains("WRONGTYPE")
                }
                _ => false,
            };
            if refused {
                // `NX` with `GET` refused after all (a syntax error, a
                // renamed command, an ACL rule): the script serves from now
                // on (and reports a refusal that concerns it).
                offered.refuse(Natives::SET_NX_GET);
            }
            if is_retryable(&error) {
                return Err(ScriptError::Redis(error));
            }
            return Ok(Some(Fast::Resolve));
        }
        _ => return Ok(Some(Fast::Resolve)),
    }
    let last = match fence {
        Value::Nil => 0,
        Value::BulkString(value) => match parse_u64(value) {
            Some(last) => last,
            // Marked (someone may wait in line), or not a token.
            None => return Ok(Some(Fast::Resolve)),
        },
        _ => return Ok(Some(Fast::Resolve)),
    };
    // A line behind an unmarked fence key is a semaphore's or rw lock's
    // (they leave no marker): the key is theirs while anyone waits in it,
    // and the script says so (kinds never mix).
    if !matches!(line, Value::Int(0)) {
        return Ok(Some(Fast::Resolve));
    }
    let Some(now_us) = server_micros(time) else {
        return Ok(Some(Fast::Resolve));
    };
    if now_us <= last {
        // The last token written is ahead of the clock (Redlock's
        // counters, a clock that stepped back): the token must be one above
        // it, and written down, or the next fast grant would be one above
        // the same key again. The script does both (its claimed mode).
        return Ok(Some(Fast::Resolve));
    }
    Ok(Some(Fast::Yes { fence: now_us }))
}

/// A decimal `u64` (no sign, no marker).
pub(super) fn parse_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    // By hand: `str::parse` after a UTF-8 check cost a few hundred
    // instructions per reply, three replies per fast acquisition.
    bytes.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// `TIME`'s reply (seconds, microseconds) in microseconds.
pub(super) fn server_micros(time: &Value) -> Option<u64> {
    let Value::Array(parts) = time else {
        return None;
    };
    let [Value::BulkString(secs), Value::BulkString(micros)] = parts.as_slice() else {
        return None;
    };
    parse_u64(secs)?
        .checked_mul(1_000_000)?
        .checked_add(parse_u64(micros)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_clock_reads_in_microseconds() {
        let time = Value::Array(vec![
            Value::BulkString(b"1764000000".to_vec()),
            Value::BulkString(b"42".to_vec()),
        ]);
        assert_eq!(server_micros(&time), Some(1_764_000_000_000_042));
        assert_eq!(server_micros(&Value::Nil), None);
    }

    #[test]
    fn only_plain_decimal_tokens_are_a_floor() {
        assert_eq!(parse_u64(b"17"), Some(17));
        assert_eq!(parse_u64(b"+17"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"1x"), None);
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
    }
}
