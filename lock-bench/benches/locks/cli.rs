//! The bench's command line: which scenarios, implementations and
//! repetitions to run.

use crate::adapters::Kind;

pub(crate) const USAGE: &str = "usage: cargo bench --workspace --bench locks -- [--quick] [--reps N] [--count N] [--impls raw,raw-fenced,raw-scripts,leasehold,rslock,rlock,async-redis-lock,distkit,distributed-lock] [S1 .. S11]";

pub(crate) struct Args {
    pub(crate) quick: bool,
    pub(crate) reps: usize,
    pub(crate) kinds: Vec<Kind>,
    pub(crate) only: Vec<String>,
    /// `--count N`: N pairs per implementation for an instruction profile
    /// (`count.rs`), no scenario.
    pub(crate) count: Option<u64>,
}

pub(crate) fn parse_args() -> Result<Option<Args>, String> {
    let mut args = Args {
        quick: false,
        reps: 0,
        kinds: Kind::ALL.to_vec(),
        only: Vec::new(),
        count: None,
    };
    let mut invoked_by_cargo_bench = false;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--bench" => invoked_by_cargo_bench = true,
            "--run" => invoked_by_cargo_bench = true,
            "--quick" => args.quick = true,
            "--reps" => {
                let n = it.next().ok_or("--reps needs a number")?;
                args.reps = n.parse().map_err(|_| format!("--reps {n}: not a number"))?;
            }
            "--count" => {
                let n = it.next().ok_or("--count needs a number")?;
                args.count = Some(
                    n.parse()
                        .map_err(|_| format!("--count {n}: not a number"))?,
                );
            }
            "--impls" => {
                let list = it.next().ok_or("--impls needs a list")?;
                args.kinds = list
                    .split(',')
                    .map(|n| Kind::from_name(n.trim()).ok_or(format!("unknown impl {n}")))
                    .collect::<Result<_, _>>()?;
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            // A scenario: `S` (or `s`) and its number.
            s if s.len() >= 2
                && s[..1].eq_ignore_ascii_case("s")
                && s[1..].bytes().all(|b| b.is_ascii_digit()) =>
            {
                args.only.push(s.to_ascii_uppercase());
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if !invoked_by_cargo_bench {
        // `cargo test --benches` / `--all-targets` runs this binary without
        // `--bench`: a benchmark has no place in a test run.
        return Ok(None);
    }
    if args.reps == 0 {
        args.reps = if args.quick { 1 } else { 3 };
    }
    Ok(Some(args))
}
