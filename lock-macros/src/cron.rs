//! `cron = "…"`: the expression is read at compile time, with the settings the
//! runtime reads it with (`leasehold::schedule::Cron`), so that a call never
//! fails for its schedule.

use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds};
use syn::LitStr;

/// Checks the expression in `lit`: it parses (seconds first, an optional
/// year), and it fires at least once (before or after the build).
pub(crate) fn check(lit: &LitStr) -> syn::Result<()> {
    let expression = lit.value();
    let example = "as in `cron = \"0 0 3 * * *\"` (03:00:00 UTC daily)";
    let fields = expression.split_whitespace().count();
    if !expression.trim_start().starts_with('@') && !(6..=7).contains(&fields) {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "invalid `cron` expression \"{expression}\": {fields} field{}, but it takes 6 \
                 (7 with a year), seconds first: `sec min hour day-of-month month day-of-week \
                 [year]`, {example}",
                if fields == 1 { "" } else { "s" }
            ),
        ));
    }
    let parser = CronParser::builder()
        .seconds(Seconds::Required)
        .sloppy_ranges(true)
        .build();
    let schedule = parser.parse(&expression).map_err(|error| {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid `cron` expression \"{expression}\": {}; {example}",
                error.to_string().trim_end_matches('.')
            ),
        )
    })?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|since| i64::try_from(since.as_secs()).ok())
        .and_then(|secs| DateTime::<Utc>::from_timestamp(secs, 0))
        .unwrap_or_default();
    let fires = schedule.find_next_occurrence(&now, true).is_ok()
        || schedule.find_previous_occurrence(&now, true).is_ok();
    if !fires {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`cron` expression \"{expression}\" never fires (no date matches it), {example}"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proc_macro2::Span;

    fn check_str(expression: &str) -> Result<(), String> {
        check(&LitStr::new(expression, Span::call_site())).map_err(|e| e.to_string())
    }

    #[test]
    fn good_expressions() {
        for good in [
            "0 0 3 * * *",
            "*/2 * * * * *",
            "0 30 9 * * MON-FRI",
            "0 0 0 L * *",
            "0 0 12 * * 5#3",
            "0 0 0 1 1 * 2020",
            "0/10 * * * * *",
            "@daily",
        ] {
            assert_eq!(check_str(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn bad_expressions() {
        let five = check_str("0 3 * * *").unwrap_err();
        assert!(
            five.starts_with("invalid `cron` expression \"0 3 * * *\": 5 fields, but it takes 6"),
            "{five}"
        );
        for bad in [
            "",
            "61 * * * * *",
            "0 0 25 * * *",
            "a b c d e f",
            "0 0 0 * 13 *",
        ] {
            let error = check_str(bad).unwrap_err();
            assert!(
                error.starts_with("invalid `cron` expression"),
                "{bad}: {error}"
            );
        }
        let never = check_str("0 0 0 30 2 *").unwrap_err();
        assert!(never.contains("never fires"), "{never}");
    }
}
