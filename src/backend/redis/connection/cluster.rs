//! `redis+cluster://` URLs.

/// The seed node URLs of a `redis+cluster://` or `rediss+cluster://` URL;
/// `None` for any other URL, `Some(Err(reason))` for a cluster URL without a
/// node or with a database other than 0 (a Cluster has only database 0).
pub(super) fn seeds(url: &str) -> Option<Result<Vec<String>, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "redis+cluster" => "redis",
        "rediss+cluster" => "rediss",
        _ => return None,
    };
    let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let (user, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let db = path.trim_start_matches('/');
    let db = &db[..db.find('?').unwrap_or(db.len())];
    if !db.is_empty() && db != "0" {
        return Some(Err(format!(
            "a Redis Cluster has only database 0, not {db}"
        )));
    }
    let query = path.find('?').map_or("", |q| &path[q..]);
    let seeds: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| format!("{scheme}://{user}{h}{query}"))
        .collect();
    if seeds.is_empty() {
        return Some(Err(
            "name at least one node: redis+cluster://host:port,host:port".into(),
        ));
    }
    Some(Ok(seeds))
}

#[cfg(test)]
mod tests {
    use super::seeds;

    #[test]
    fn cluster_urls_give_one_url_per_node() {
        assert_eq!(seeds("redis://127.0.0.1:6379"), None);
        assert_eq!(seeds("unix:///tmp/r.sock"), None);
        assert_eq!(seeds("not a url"), None);
        assert_eq!(
            seeds("redis+cluster://10.0.0.1:7000,10.0.0.2:7001"),
            Some(Ok(vec![
                "redis://10.0.0.1:7000".into(),
                "redis://10.0.0.2:7001".into()
            ]))
        );
        assert_eq!(
            seeds("rediss+cluster://app:p@ss@h1:7000, h2:7000/0?protocol=resp3"),
            Some(Ok(vec![
                "rediss://app:p@ss@h1:7000?protocol=resp3".into(),
                "rediss://app:p@ss@h2:7000?protocol=resp3".into()
            ]))
        );
        assert_eq!(
            seeds("REDIS+CLUSTER://h:1/"),
            Some(Ok(vec!["redis://h:1".into()]))
        );
        let bad = seeds("redis+cluster://h:1/3").unwrap().unwrap_err();
        assert!(bad.contains("only database 0"), "{bad}");
        let empty = seeds("redis+cluster://").unwrap().unwrap_err();
        assert!(empty.contains("at least one node"), "{empty}");
    }
}
