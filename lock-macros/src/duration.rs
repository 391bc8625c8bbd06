//! Durations written as strings in the attribute (`"10s"`, `"1m30s"`, `"500ms"`),
//! parsed at expansion time into a number of milliseconds.

use std::fmt;

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use syn::LitStr;

const DAY_MILLIS: u64 = 24 * 60 * 60 * 1000;

// The limits of leasehold-core (`limits.rs`), which this crate cannot depend on
// (the facade depends on both). The test `limits_are_the_librarys` compares them
// with the library's own constants, so that they cannot drift apart.

/// The shortest lease: 10 ms, `leasehold::MIN_TTL`; `LockRequest::ttl` refuses
/// shorter ones at every call.
pub(crate) const MIN_TTL_MILLIS: u64 = 10;

/// The longest lease: 365 days, `leasehold::MAX_TTL`, what `LockRequest::ttl`,
/// `at_least` and `max_hold` accept.
pub(crate) const MAX_TTL_MILLIS: u64 = 365 * DAY_MILLIS;

/// The longest wait: 3650 days, `leasehold::MAX_WAIT` (longer waits are capped to it
/// by `LockRequest::wait`, so a longer literal in the attribute is a mistake).
pub(crate) const MAX_WAIT_MILLIS: u64 = 3650 * DAY_MILLIS;

/// The largest duration any option accepts; [`parse`] rejects anything longer.
pub(crate) const MAX_MILLIS: u64 = MAX_WAIT_MILLIS;

/// The range of durations an option accepts, and how the error messages name
/// its ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit {
    /// The shortest accepted (the syntax already refuses zero).
    pub min_millis: u64,
    pub min_text: &'static str,
    /// The longest accepted.
    pub millis: u64,
    pub text: &'static str,
}

/// What [`parse`] accepts at most, whatever the option.
const ANY: Limit = Limit {
    min_millis: 1,
    min_text: "1ms",
    millis: MAX_MILLIS,
    text: "3650 days (87600h)",
};

/// The limits of each duration option: the same as the request builder's, so
/// that a literal the library would refuse at every call is a compile error.
pub(crate) fn limit(option: &str) -> Limit {
    match option {
        "ttl" => Limit {
            min_millis: MIN_TTL_MILLIS,
            min_text: "10ms (`leasehold::MIN_TTL`), the shortest lease `LockRequest::ttl` \
                       accepts: a shorter one would run out before the lock could be used",
            millis: MAX_TTL_MILLIS,
            text: "365 days (8760h, `leasehold::MAX_TTL`), the longest lease `LockRequest::ttl` \
                   accepts",
        },
        "at_least" => Limit {
            millis: MAX_TTL_MILLIS,
            text: "365 days (8760h, `leasehold::MAX_TTL`), the longest `LockRequest::at_least` \
                   accepts",
            ..ANY
        },
        "max_hold" => Limit {
            millis: MAX_TTL_MILLIS,
            text: "365 days (8760h, `leasehold::MAX_TTL`), the longest `LockRequest::max_hold` \
                   accepts",
            ..ANY
        },
        "every" => Limit {
            millis: MAX_TTL_MILLIS,
            text: "365 days (8760h), the longest period whose slot a lock can be kept for",
            ..ANY
        },
        "wait" => Limit {
            millis: MAX_WAIT_MILLIS,
            text: "3650 days (87600h), `leasehold::MAX_WAIT`",
            ..ANY
        },
        _ => ANY,
    }
}

/// What the error messages say about the accepted syntax.
pub(crate) const HELP: &str = "write a number followed by a unit: `ms`, `s`, `m` (minutes) or `h`, \
     or a combination from the largest unit down such as \"1m30s\" or \"1h2m3s500ms\"";

/// The units, from the largest to the smallest.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DurationError {
    /// `""`
    Empty,
    /// `"10 s"`, `" 10s"`
    Whitespace,
    /// `"s"`, `"ms10"`, `"-1s"`: something other than a number where a number is due.
    ExpectedNumber { found: String },
    /// `"10"`, `"1m30"`; for the latter, what was probably meant (`"1m30s"`):
    /// the input with the unit after the last one given.
    MissingUnit {
        number: String,
        suggestion: Option<String>,
    },
    /// `"1.5s"`, `"1,5s"`
    Fraction,
    /// `"10x"`, `"10M"`, `"1d"`, `"10sec"`
    UnknownUnit { unit: String },
    /// `"30s1m"`, `"1s1s"`
    UnitOrder { unit: &'static str },
    /// `"0s"`, `"0m0s"`
    Zero,
    /// More than the option's limit (at most [`MAX_MILLIS`]), or a number that
    /// overflows.
    TooLong { limit: &'static str },
    /// Less than the option's lower limit (`ttl` below `leasehold::MIN_TTL`).
    TooShort { limit: &'static str },
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurationError::Empty => f.write_str("the duration is empty"),
            DurationError::Whitespace => f.write_str("whitespace is not allowed in a duration"),
            DurationError::ExpectedNumber { found } => {
                write!(f, "expected a number, found `{found}`")
            }
            DurationError::MissingUnit {
                number,
                suggestion: None,
            } => write!(f, "`{number}` has no unit"),
            DurationError::MissingUnit {
                number,
                suggestion: Some(suggestion),
            } => write!(f, "`{number}` has no unit (did you mean \"{suggestion}\"?)"),
            DurationError::Fraction => f.write_str("fractions are not allowed"),
            DurationError::UnknownUnit { unit } if unit == "M" => f.write_str(
                "unknown unit `M` (months are not supported; minutes are a lower-case `m`)",
            ),
            DurationError::UnknownUnit { unit } => write!(f, "unknown unit `{unit}`"),
            DurationError::UnitOrder { unit } => write!(
                f,
                "unit `{unit}` comes too late: units go from the largest to the smallest, each at most once"
            ),
            DurationError::Zero => f.write_str("the duration must be greater than zero"),
            DurationError::TooLong { limit } => {
                write!(f, "the duration is longer than {limit}")
            }
            DurationError::TooShort { limit } => {
                write!(f, "the duration is shorter than {limit}")
            }
        }
    }
}

/// Parses `1h2m3s500ms`-style durations into milliseconds.
pub(crate) fn parse(input: &str) -> Result<u64, DurationError> {
    if input.is_empty() {
        return Err(DurationError::Empty);
    }
    if input.chars().any(char::is_whitespace) {
        return Err(DurationError::Whitespace);
    }
    let mut rest = input;
    let mut total: u64 = 0;
    // Index in `UNITS` of the next unit allowed (units go from the largest down).
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(DurationError::ExpectedNumber {
                found: rest.to_owned(),
            });
        }
        let (number, after) = rest.split_at(digits);
        if after.starts_with(['.', ',']) {
            return Err(DurationError::Fraction);
        }
        let unit_len: usize = after
            .chars()
            .take_while(|c| c.is_alphabetic())
            .map(char::len_utf8)
            .sum();
        if unit_len == 0 {
            if after.is_empty() {
                // `"1h30"`: the number after a unit is most likely in the next
                // smaller unit (`"1h30m"`). A number alone is left unguessed.
                let suggestion = (next_unit > 0)
                    .then(|| UNITS.get(next_unit))
                    .flatten()
                    .map(|(unit, _)| format!("{input}{unit}"));
                return Err(DurationError::MissingUnit {
                    number: number.to_owned(),
                    suggestion,
                });
            }
            // A number followed by punctuation, e.g. `10-` or `10_s`.
            return Err(DurationError::UnknownUnit {
                unit: after.chars().take(1).collect(),
            });
        }
        let (unit, after_unit) = after.split_at(unit_len);
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(DurationError::UnknownUnit {
                unit: unit.to_owned(),
            });
        };
        if index < next_unit {
            return Err(DurationError::UnitOrder {
                unit: UNITS[index].0,
            });
        }
        next_unit = index + 1;
        let too_long = DurationError::TooLong { limit: ANY.text };
        let value: u64 = number.parse().map_err(|_| too_long.clone())?;
        total = value
            .checked_mul(UNITS[index].1)
            .and_then(|millis| total.checked_add(millis))
            .ok_or_else(|| too_long.clone())?;
        if total > MAX_MILLIS {
            return Err(too_long);
        }
        rest = after_unit;
    }
    if total == 0 {
        return Err(DurationError::Zero);
    }
    Ok(total)
}

/// Parses the string literal given to option `option`, within the option's
/// [`limit`], with an error at the literal. A duration out of range is well
/// written: its message leaves out the syntax help.
pub(crate) fn parse_lit(option: &str, lit: &LitStr) -> syn::Result<u64> {
    let value = lit.value();
    let limit = limit(option);
    let too_long = DurationError::TooLong { limit: limit.text };
    let parsed = match parse(&value) {
        Ok(millis) if millis > limit.millis => Err(too_long),
        Ok(millis) if millis < limit.min_millis => Err(DurationError::TooShort {
            limit: limit.min_text,
        }),
        Err(DurationError::TooLong { .. }) => Err(too_long),
        other => other,
    };
    parsed.map_err(|err| {
        let message = match err {
            DurationError::TooLong { .. } | DurationError::TooShort { .. } => {
                format!("invalid `{option}` duration \"{value}\": {err}")
            }
            _ => format!("invalid `{option}` duration \"{value}\": {err}; {HELP}"),
        };
        syn::Error::new(lit.span(), message)
    })
}

/// `::core::time::Duration::from_millis(N)`.
///
/// Deliberately not spanned at the user's literal: the expression cannot fail to
/// compile, and with the macro's own span lints such as clippy's
/// `duration_suboptimal_units` know that the user did not write it.
pub(crate) fn to_tokens(millis: u64) -> TokenStream {
    let n = Literal::u64_unsuffixed(millis);
    quote! { ::core::time::Duration::from_millis(#n) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> u64 {
        match parse(s) {
            Ok(ms) => ms,
            Err(e) => panic!("{s:?} should parse, got {e}"),
        }
    }

    fn err(s: &str) -> DurationError {
        match parse(s) {
            Ok(ms) => panic!("{s:?} should be rejected, got {ms} ms"),
            Err(e) => e,
        }
    }

    #[test]
    fn single_units() {
        assert_eq!(ok("1ms"), 1);
        assert_eq!(ok("500ms"), 500);
        assert_eq!(ok("1s"), 1_000);
        assert_eq!(ok("10s"), 10_000);
        assert_eq!(ok("1m"), 60_000);
        assert_eq!(ok("5m"), 300_000);
        assert_eq!(ok("1h"), 3_600_000);
        assert_eq!(ok("24h"), 86_400_000);
    }

    #[test]
    fn combinations() {
        assert_eq!(ok("1m30s"), 90_000);
        assert_eq!(ok("1h2m3s500ms"), 3_723_500);
        assert_eq!(ok("1h30m"), 5_400_000);
        assert_eq!(ok("2s250ms"), 2_250);
        assert_eq!(ok("1h500ms"), 3_600_500);
        assert_eq!(ok("1m0s"), 60_000);
        assert_eq!(ok("0m5s"), 5_000);
    }

    #[test]
    fn large_numbers_in_small_units() {
        assert_eq!(ok("90s"), 90_000);
        assert_eq!(ok("1500ms"), 1_500);
        assert_eq!(ok("120m"), 7_200_000);
        assert_eq!(ok("007s"), 7_000);
    }

    const TOO_LONG: DurationError = DurationError::TooLong { limit: ANY.text };

    #[test]
    fn ten_years_is_the_limit_of_the_syntax() {
        assert_eq!(ok("87600h"), MAX_MILLIS);
        assert_eq!(ok("87599h60m"), MAX_MILLIS);
        assert_eq!(err("87600h1ms"), TOO_LONG);
        assert_eq!(err("87601h"), TOO_LONG);
        assert_eq!(err("5256001m"), TOO_LONG);
        assert_eq!(err("315360000001ms"), TOO_LONG);
    }

    fn lit_result(option: &str, value: &str) -> Result<u64, String> {
        let lit = LitStr::new(value, proc_macro2::Span::call_site());
        parse_lit(option, &lit).map_err(|e| e.to_string())
    }

    /// The attribute accepts what the request builder accepts: 365 days for a
    /// lease (`LockRequest::ttl`, `at_least`, `max_hold`), `MAX_WAIT` for `wait`,
    /// and a lease no shorter than `MIN_TTL`.
    #[test]
    fn each_option_has_the_builders_limit() {
        for option in ["ttl", "at_least", "max_hold", "every"] {
            assert_eq!(lit_result(option, "8760h"), Ok(MAX_TTL_MILLIS));
            assert_eq!(lit_result(option, "168h1s"), Ok(168 * 3_600_000 + 1000));
            let message = lit_result(option, "8760h1s").unwrap_err();
            assert!(
                message.contains("the duration is longer than 365 days (8760h"),
                "{message}"
            );
            assert!(!message.contains(HELP), "{message}");
        }
        assert_eq!(lit_result("wait", "87600h"), Ok(MAX_WAIT_MILLIS));
        let message = lit_result("wait", "87601h").unwrap_err();
        assert!(
            message.contains("the duration is longer than 3650 days (87600h)"),
            "{message}"
        );

        assert_eq!(lit_result("ttl", "10ms"), Ok(MIN_TTL_MILLIS));
        let message = lit_result("ttl", "9ms").unwrap_err();
        assert_eq!(
            message,
            "invalid `ttl` duration \"9ms\": the duration is shorter than 10ms \
             (`leasehold::MIN_TTL`), the shortest lease `LockRequest::ttl` accepts: a shorter \
             one would run out before the lock could be used"
        );
        // The other options have no lower limit but zero.
        for option in ["at_least", "max_hold", "wait"] {
            assert_eq!(lit_result(option, "1ms"), Ok(1));
        }
        assert_eq!(MAX_TTL_MILLIS, 365 * 24 * 3_600_000);
    }

    /// The limits are leasehold-core's, which this crate cannot import: the
    /// facade (a dev-dependency) says what they are.
    #[test]
    fn limits_are_the_librarys() {
        use std::time::Duration;
        assert_eq!(Duration::from_millis(MIN_TTL_MILLIS), leasehold::MIN_TTL);
        assert_eq!(Duration::from_millis(MAX_TTL_MILLIS), leasehold::MAX_TTL);
        assert_eq!(Duration::from_millis(MAX_WAIT_MILLIS), leasehold::MAX_WAIT);
    }

    #[test]
    fn overflow_is_too_long_not_a_panic() {
        assert_eq!(err("99999999999999999999999s"), TOO_LONG);
        assert_eq!(err("18446744073709551615h"), TOO_LONG);
        assert_eq!(err("18446744073709551615ms"), TOO_LONG);
    }

    #[test]
    fn rejects_empty() {
        assert_eq!(err(""), DurationError::Empty);
    }

    #[test]
    fn rejects_whitespace() {
        assert_eq!(err(" 10s"), DurationError::Whitespace);
        assert_eq!(err("10s "), DurationError::Whitespace);
        assert_eq!(err("10 s"), DurationError::Whitespace);
        assert_eq!(err("1m 30s"), DurationError::Whitespace);
        assert_eq!(err("10\ts"), DurationError::Whitespace);
        assert_eq!(err(" "), DurationError::Whitespace);
    }

    #[test]
    fn rejects_zero() {
        assert_eq!(err("0s"), DurationError::Zero);
        assert_eq!(err("0ms"), DurationError::Zero);
        assert_eq!(err("0h0m0s0ms"), DurationError::Zero);
        assert_eq!(err("00m"), DurationError::Zero);
    }

    #[test]
    fn rejects_unknown_units() {
        for (input, unit) in [
            ("10x", "x"),
            ("10M", "M"),
            ("1d", "d"),
            ("2w", "w"),
            ("1y", "y"),
            ("10S", "S"),
            ("10H", "H"),
            ("10MS", "MS"),
            ("10Ms", "Ms"),
            ("10sec", "sec"),
            ("10secs", "secs"),
            ("10min", "min"),
            ("5us", "us"),
            ("5ns", "ns"),
            ("10µs", "µs"),
            ("1mss", "mss"),
            ("1m30x", "x"),
            ("10-", "-"),
            ("10_s", "_"),
        ] {
            assert_eq!(
                err(input),
                DurationError::UnknownUnit { unit: unit.into() },
                "{input}"
            );
        }
    }

    #[test]
    fn months_get_a_hint() {
        let message = err("10M").to_string();
        assert!(message.contains("months are not supported"), "{message}");
        assert!(message.contains("lower-case `m`"), "{message}");
    }

    #[test]
    fn rejects_missing_unit() {
        let missing = |number: &str, suggestion: Option<&str>| DurationError::MissingUnit {
            number: number.into(),
            suggestion: suggestion.map(Into::into),
        };
        assert_eq!(err("10"), missing("10", None));
        assert_eq!(err("0"), missing("0", None));
        // After a unit, the next smaller one is suggested.
        assert_eq!(err("1h30"), missing("30", Some("1h30m")));
        assert_eq!(err("1m30"), missing("30", Some("1m30s")));
        assert_eq!(err("2s500"), missing("500", Some("2s500ms")));
        assert_eq!(err("1h2m3"), missing("3", Some("1h2m3s")));
        assert_eq!(err("1h30s5"), missing("5", Some("1h30s5ms")));
        // Nothing is smaller than `ms`.
        assert_eq!(err("1ms5"), missing("5", None));
        assert_eq!(
            err("1h30").to_string(),
            "`30` has no unit (did you mean \"1h30m\"?)"
        );
    }

    #[test]
    fn rejects_missing_number() {
        for (input, found) in [
            ("s", "s"),
            ("ms", "ms"),
            ("m30s", "m30s"),
            ("-1s", "-1s"),
            ("+1s", "+1s"),
            ("1m-30s", "-30s"),
            (".5s", ".5s"),
            ("x", "x"),
            ("10s_", "_"),
            ("1s+", "+"),
        ] {
            assert_eq!(
                err(input),
                DurationError::ExpectedNumber {
                    found: found.into()
                },
                "{input}"
            );
        }
    }

    #[test]
    fn rejects_fractions() {
        assert_eq!(err("1.5s"), DurationError::Fraction);
        assert_eq!(err("1,5s"), DurationError::Fraction);
        assert_eq!(err("0.5h"), DurationError::Fraction);
    }

    #[test]
    fn rejects_units_out_of_order_or_repeated() {
        assert_eq!(err("30s1m"), DurationError::UnitOrder { unit: "m" });
        assert_eq!(err("1s1s"), DurationError::UnitOrder { unit: "s" });
        assert_eq!(err("500ms1s"), DurationError::UnitOrder { unit: "s" });
        assert_eq!(err("1m1h"), DurationError::UnitOrder { unit: "h" });
        assert_eq!(err("1h1h"), DurationError::UnitOrder { unit: "h" });
    }

    #[test]
    fn every_message_is_readable() {
        for input in [
            "", " ", "s", "10", "1.5s", "10x", "10M", "30s1m", "0s", "87601h",
        ] {
            let message = err(input).to_string();
            assert!(!message.is_empty());
            assert!(!message.ends_with('.'), "{message}");
        }
    }

    #[test]
    fn literal_errors_name_the_option_and_the_units() {
        let lit = LitStr::new("10x", proc_macro2::Span::call_site());
        let message = match parse_lit("ttl", &lit) {
            Ok(ms) => panic!("accepted as {ms}"),
            Err(e) => e.to_string(),
        };
        assert!(
            message.starts_with("invalid `ttl` duration \"10x\""),
            "{message}"
        );
        for unit in ["`ms`", "`s`", "`m`", "`h`"] {
            assert!(message.contains(unit), "{message}");
        }
    }

    #[test]
    fn emits_from_millis() {
        let tokens = to_tokens(90_000).to_string();
        assert_eq!(tokens, ":: core :: time :: Duration :: from_millis (90000)");
    }
}
