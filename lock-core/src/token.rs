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
    let mut buffer = [0u8; 128];
    let len = 33 + name.len();
    if len > buffer.len() {
        let mut token = hex(&bytes);
        token.push(':');
        token.push_str(name);
        return Ok(token.into());
    }
    for (i, b) in bytes.iter().enumerate() {
        buffer[2 * i] = DIGITS[usize::from(b >> 4)];
        buffer[2 * i + 1] = DIGITS[usize::from(b & 0x0f)];
    }
    buffer[32] = b':';
    buffer[33..len].copy_from_slice(name.as_bytes());
    // Hex digits, ':' and a `&str`: valid UTF-8 by construction.
    match std::str::from_utf8(&buffer[..len]) {
        Ok(token) => Ok(Arc::from(token)),
        Err(_) => Ok(format!("{}:{name}", hex(&bytes)).into()),
    }
}

const DIGITS: &[u8; 16] = b"0123456789abcdef";

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
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
        assert_eq!(hex(&[0x00, 0xff, 0x1a]), "00ff1a");
        Ok(())
    }
}
