//! Redis's glob patterns (`*`, `?`, `[abc]`, `[^a-z]`, `\x`), for the
//! in-memory backend's `list`, which must match what `SCAN ... MATCH` does.

/// Whether `text` matches the glob `pattern`, as Redis's `stringmatchlen`.
pub(crate) fn matches(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    matches_at(&pattern, &text)
}

fn matches_at(pattern: &[char], text: &[char]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where to resume after the last `*`: (pattern index after it, text index).
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() {
            match pattern[p] {
                '*' => {
                    star = Some((p + 1, t));
                    p += 1;
                    continue;
                }
                _ if t < text.len() => {
                    if let Some(len) = one(&pattern[p..], text[t]) {
                        p += len;
                        t += 1;
                        continue;
                    }
                }
                _ => {}
            }
        } else if t == text.len() {
            return true;
        }
        // Mismatch: let the last `*` take one more character.
        match star {
            Some((after, from)) if from < text.len() => {
                star = Some((after, from + 1));
                p = after;
                t = from + 1;
            }
            _ => return false,
        }
    }
}

/// If the pattern's first element (not `*`) matches `c`, its length.
fn one(pattern: &[char], c: char) -> Option<usize> {
    match pattern.first()? {
        '?' => Some(1),
        '\\' if pattern.len() >= 2 => (pattern[1] == c).then_some(2),
        '[' => class(pattern, c),
        &literal => (literal == c).then_some(1),
    }
}

/// A `[...]` class at the start of `pattern`; an unclosed one runs to the end.
fn class(pattern: &[char], c: char) -> Option<usize> {
    let mut i = 1;
    let negate = pattern.get(i) == Some(&'^');
    if negate {
        i += 1;
    }
    let mut found = false;
    while i < pattern.len() && pattern[i] != ']' {
        if pattern[i] == '\\' && i + 1 < pattern.len() {
            found |= pattern[i + 1] == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == '-' && pattern[i + 2] != ']' {
            let (a, b) = (
                pattern[i].min(pattern[i + 2]),
                pattern[i].max(pattern[i + 2]),
            );
            found |= (a..=b).contains(&c);
            i += 3;
        } else {
            found |= pattern[i] == c;
            i += 1;
        }
    }
    let len = (i + 1).min(pattern.len());
    (found != negate).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_like_redis() {
        assert!(matches("order:*", "order:42"));
        assert!(matches("order:*", "order:"));
        assert!(!matches("order:*", "orders:42"));
        assert!(matches("*", ""));
        assert!(matches("a*b*c", "axxbyyc"));
        assert!(!matches("a*b*c", "axxbyy"));
        assert!(matches("h?llo", "hello"));
        assert!(matches("h[ae]llo", "hallo"));
        assert!(!matches("h[ae]llo", "hillo"));
        assert!(matches("h[^e]llo", "hallo"));
        assert!(!matches("h[^e]llo", "hello"));
        assert!(matches("h[a-b]llo", "hbllo"));
        assert!(matches("a\\*", "a*"));
        assert!(!matches("a\\*", "ab"));
        assert!(!matches("abc", "abcd"));
    }
}
