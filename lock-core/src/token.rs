//! Owner tokens: 128 bits from the operating system's CSPRNG, as 32 hex
//! characters, then `:` and the client's name. Unguessable, so no other
//! process can release or extend a lease it does not own, even by accident;
//! and the name tells operators who holds a lock at no extra command.

use std::sync::Arc;

use crate::error::LockError;

/// A fresh owner token for a client named `name`, built in place: one
/// allocation per acquisition (a usual name fits a buffer on the stack).
pub(crate) fn owner_token(name: &str) -> Result<Arc<str>, LockError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        LockError::backend(
            "local",
            format!("the operating system's random generator failed: {e}"),
        )
    })?;
    let digits = hex(&bytes);
    // A long name: one allocation more.
    let allocated = || format!("{}:{name}", String::from_utf8_lossy(&digits)).into();
    let mut buffer = [0u8; 128];
    let len = digits.len() + 1 + name.len();
    let Some(token) = buffer.get_mut(..len) else {
        return Ok(allocated());
    };
    token[..digits.len()].copy_from_slice(&digits);
    token[digits.len()] = b':';
    token[digits.len() + 1..].copy_from_slice(name.as_bytes());
    // Hex digits, ':' and a `&str`: valid UTF-8 (checked again, which is a
    // quick pass over ASCII; the lossy form's chunk walk cost ~300
    // instructions per acquisition).
    match std::str::from_utf8(token) {
        Ok(token) => Ok(Arc::from(token)),
        Err(_) => Ok(allocated()),
    }
}

/// A name for this client's wake-ups, as 16 hex characters (64 random
/// bits): a waiter's place carries it, and a release sent by the same
/// client hands that waiter its grant through its own reply, without
/// `PUBLISH` (see `family_hand_on.lua`). `None` when the operating
/// system's random generator fails: every grant is then published.
pub(crate) fn wakeups_name() -> Option<Arc<str>> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    let digits = hex(&bytes);
    std::str::from_utf8(digits.get(..16)?).ok().map(Arc::from)
}

/// `bytes` as lowercase hex digits.
fn hex(bytes: &[u8; 16]) -> [u8; 32] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 0x0f)];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() -> Result<(), LockError> {
        let a = owner_token("w")?;
        let b = owner_token("w")?;
        assert_eq!(a.len(), 34);
        assert!(a[..32].bytes().all(|c| c.is_ascii_hexdigit()));
        assert!(a.ends_with(":w"));
        assert_ne!(a, b);
        let long = "n".repeat(200);
        let c = owner_token(&long)?;
        assert_eq!(c.len(), 33 + 200);
        assert!(c.ends_with(&format!(":{long}")));
        let mut bytes = [0u8; 16];
        bytes[..3].copy_from_slice(&[0x00, 0xff, 0x1a]);
        assert!(hex(&bytes).starts_with(b"00ff1a"));
        let (one, two) = (wakeups_name(), wakeups_name());
        assert!(
            one.as_deref()
                .is_some_and(|n| n.len() == 16 && n.bytes().all(|c| c.is_ascii_hexdigit()))
        );
        assert_ne!(one, two);
        Ok(())
    }
}
