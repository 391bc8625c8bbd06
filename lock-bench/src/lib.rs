//! The `locks` benchmark's shared code (not published).
//!
//! The benchmark itself is `benches/locks` (`cargo bench --workspace --bench locks`);
//! this library holds only what the facade's `examples/marketplace.rs` shares
//! with it, so that the example builds without the peer crates the benchmark
//! measures against.

pub mod marketplace;
