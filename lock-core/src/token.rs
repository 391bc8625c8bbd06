//! Owner tokens: 128 bits from the operating system's CSPRNG, as 32 hex
//! characters. Unguessable, so no other process can release or extend a lease
//! it does not own, even by accident.

use crate::error::LockError;

pub(crate) fn owner_token() -> Result<String, LockError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        LockError::backend(
            "local",
            format!("the operating system's random generator failed: {e}"),
        )
    })?;
    Ok(hex(&bytes))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
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
        let a = owner_token()?;
        let b = owner_token()?;
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert_eq!(hex(&[0x00, 0xff, 0x1a]), "00ff1a");
        Ok(())
    }
}
