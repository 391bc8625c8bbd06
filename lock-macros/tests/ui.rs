//! Compile-time behaviour of `#[distributed_lock]`: every misuse is a compile error
//! at the offending token (`tests/ui/*.rs`, messages pinned in `.stderr` files), and
//! the supported shapes compile without warnings and run (`tests/ui/pass/*.rs`).
//!
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p leasehold-macros --test ui`,
//! then review every change.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
