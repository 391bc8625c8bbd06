//! The `SCAN` behind `list`: every key matching a glob on one server, with
//! a cursor (never `KEYS`).

use redis::aio::ConnectionLike;

use crate::backend::SCAN_COUNT;

/// How many locks `list` inspects at once.
pub(super) const LIST_CONCURRENCY: usize = 16;

/// Every key matching `glob` on the server behind `con`: `SCAN` with a
/// cursor until it comes back to 0.
pub(crate) async fn scan_all<C: ConnectionLike>(
    con: &mut C,
    glob: &str,
) -> Result<Vec<String>, redis::RedisError> {
    let mut names = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, page): (u64, Vec<String>) = scan_command(cursor, glob).query_async(con).await?;
        names.extend(page);
        if next == 0 {
            return Ok(names);
        }
        cursor = next;
    }
}

/// One `SCAN cursor MATCH glob COUNT n`.
pub(crate) fn scan_command(cursor: u64, glob: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor)
        .arg("MATCH")
        .arg(glob)
        .arg("COUNT")
        .arg(SCAN_COUNT);
    cmd
}
