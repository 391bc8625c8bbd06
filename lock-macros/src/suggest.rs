//! "Did you mean …?" for an unknown attribute option: a misspelling of a
//! known option (`tll`, `max-hold`, `permit`) or a name other lock libraries
//! use for it (`timeout` for `wait`, `lease` for `ttl`).

/// Names other libraries give to an option: (their name, ours).
const SYNONYMS: &[(&str, &str)] = &[
    ("timeout", "wait"),
    ("acquire_timeout", "wait"),
    ("wait_timeout", "wait"),
    ("lease", "ttl"),
    ("lease_time", "ttl"),
    ("expire", "ttl"),
    ("expiry", "ttl"),
    ("auto_renew", "renew"),
    ("renewal", "renew"),
    ("keep_alive", "renew"),
    ("watchdog", "renew"),
    ("name", "key"),
    ("min_hold", "at_least"),
    ("lock_at_least_for", "at_least"),
    ("lock_at_most_for", "max_hold"),
    ("interval", "every"),
    ("period", "every"),
    ("schedule", "cron"),
];

/// The option `given` was probably meant to be, among `known`: a synonym
/// from another library, or the closest name within a typo's distance (one
/// edit for short names, a third of the name for longer ones).
pub(crate) fn closest<'a>(given: &str, known: &[&'a str]) -> Option<&'a str> {
    let given = given.to_ascii_lowercase().replace('-', "_");
    if let Some(&(_, ours)) = SYNONYMS.iter().find(|(theirs, _)| *theirs == given)
        && let Some(&name) = known.iter().find(|name| **name == ours)
    {
        return Some(name);
    }
    let allowed = (given.chars().count() / 3).max(1);
    known
        .iter()
        .map(|name| (distance(&given, name), *name))
        .filter(|(d, _)| *d <= allowed)
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

/// `unknown option `x`` with a suggestion when there is one, then the list.
pub(crate) fn unknown_option(given: &str, known: &[&str], list: &str) -> String {
    match closest(given, known) {
        Some(name) => {
            format!("unknown option `{given}` (did you mean `{name}`?); the options are {list}")
        }
        None => format!("unknown option `{given}`; the options are {list}"),
    }
}

/// Edits (insert, delete, substitute, swap two neighbours) from `a` to `b`.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: the distance between a[..i] and b[..j].
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::{closest, distance};

    const KNOWN: &[&str] = &[
        "key", "keys", "ttl", "renew", "wait", "at_least", "max_hold", "every", "cron", "permits",
        "read", "write", "client", "crate",
    ];

    #[test]
    fn typos_find_their_option() {
        assert_eq!(closest("tll", KNOWN), Some("ttl"));
        assert_eq!(closest("permit", KNOWN), Some("permits"));
        assert_eq!(closest("max-hold", KNOWN), Some("max_hold"));
        assert_eq!(closest("atleast", KNOWN), Some("at_least"));
        assert_eq!(closest("reneww", KNOWN), Some("renew"));
        assert_eq!(closest("Wait", KNOWN), Some("wait"));
    }

    #[test]
    fn other_libraries_names_find_ours() {
        assert_eq!(closest("timeout", KNOWN), Some("wait"));
        assert_eq!(closest("lease", KNOWN), Some("ttl"));
        assert_eq!(closest("auto_renew", KNOWN), Some("renew"));
        // A synonym whose option the attribute lacks suggests nothing.
        assert_eq!(closest("timeout", &["election", "ttl"]), None);
    }

    #[test]
    fn unrelated_names_get_no_suggestion() {
        assert_eq!(closest("retries", KNOWN), None);
        assert_eq!(closest("x", KNOWN), None);
        assert_eq!(closest("database", KNOWN), None);
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(distance("ttl", "ttl"), 0);
        assert_eq!(distance("tll", "ttl"), 1);
        assert_eq!(distance("tlt", "ttl"), 1);
        assert_eq!(distance("", "key"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
