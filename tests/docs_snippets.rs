//! Every ```rust snippet of README.md and docs/*.md compiles against the
//! crate as it is now: a renamed method or a changed signature breaks this
//! test, not a reader's first try.
//!
//! The snippets are written for readers, so they leave things out: the
//! statements of a snippet run inside an `async fn` returning
//! `Result<(), Box<dyn Error>>`, `{ ... }` stands for a body, and the few
//! names a snippet takes as given (`AppError`, `Order`, the example
//! service's `app`, ...) come from the prelude below. All snippets go into
//! one file (one module each), compiled once by trybuild.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What snippets take as given.
const PRELUDE: &str = r#"
    #![allow(unused, unreachable_code, dead_code, unnameable_test_items)]
    use std::sync::Arc;
    use std::time::Duration;
    use axum::http::StatusCode;
    use leasehold::testing::FaultyClient;
    use leasehold::{LockClient, LockError};
    use super::axum_orders::{app, Payments};
    type NaiveDate = String;
    type UserId = u64;
    pub struct Receipt;
    pub struct Order { pub id: u64 }
    pub struct AppError;
    impl From<leasehold::LockError> for AppError {
        fn from(_: leasehold::LockError) -> Self { AppError }
    }
    async fn write_order(_token: u64) {}
    async fn reconcile() -> u64 { 0 }
    async fn post(_app: &axum::Router, _path: &str) -> (StatusCode, String) { todo!() }
"#;

fn rust_snippets(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut snippets = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (number, line) in text.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(info)) if info.trim() == "rust" => {
                current = Some((number + 1, String::new()))
            }
            (Some(_), Some(_)) => snippets.extend(current.take()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            _ => {}
        }
    }
    snippets
}

#[test]
fn every_rust_snippet_of_the_docs_compiles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    files.extend(docs);

    let mut source = String::from("#![allow(unused)]\n");
    let _ = writeln!(
        source,
        "#[path = {:?}]\nmod axum_orders;",
        root.join("examples/axum_orders.rs")
    );
    let mut count = 0;
    for file in &files {
        for (line, body) in rust_snippets(file) {
            count += 1;
            let body = body.replace("{ ... }", "{ todo!() }");
            let _ = writeln!(
                source,
                "/// {}:{line}\nmod snippet_{count} {{\n{PRELUDE}\n\
                 async fn snippet() -> Result<(), Box<dyn std::error::Error>> {{\n{body}\nOk(())\n}}\n}}",
                file.strip_prefix(root).unwrap_or(file).display()
            );
        }
    }
    source.push_str("fn main() {}\n");
    assert!(
        count >= 8,
        "only {count} snippets found: did the docs move?"
    );

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-snippets");
    std::fs::create_dir_all(&dir).expect("a directory for the snippets");
    let path = dir.join("snippets.rs");
    std::fs::write(&path, source).expect("write the snippets");
    trybuild::TestCases::new().pass(&path);
}
