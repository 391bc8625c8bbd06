//! Durations on the command line: `500ms`, `10s`, `5m`, `1h`, or a plain
//! number of seconds.

/// The seconds that `text` gives: a number followed by one of `units` (its
/// name and its length in seconds), or a plain number of seconds. `like`
/// gives examples for the error message, and `names` the units it lists.
pub(crate) fn seconds(
    text: &str,
    units: &[(&str, f64)],
    like: &str,
    names: &str,
) -> Result<f64, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like {like}"))?;
    match units.iter().find(|(name, _)| *name == unit) {
        Some((_, length)) => Ok(value * length),
        None => Err(format!("`{text}`: the unit must be {names}")),
    }
}
