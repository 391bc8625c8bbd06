//! leasehold (facade) — placeholder, being written.
pub use leasehold_core::*;
