//! The JSON envelope a job is stored as, `{"type": "<job name>", "args": {...}}`,
//! read without knowing the job's type (the typed side is `crate::job`).

use serde::Deserialize;

#[derive(Deserialize)]
pub(crate) struct Head<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) name: std::borrow::Cow<'a, str>,
}

/// The job name a stored body's envelope gives, if it has one.
pub(crate) fn job_name(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<Head<'_>>(body)
        .ok()
        .map(|h| h.name.into_owned())
}

/// The member a job enqueued unique until its run starts carries last in
/// its envelope (see [`UniqueUntil`](crate::contract::queues::UniqueUntil)),
/// as redjob writes it.
const UNTIL_START: &[u8] = br#""unique_until":"start"}"#;

/// `body` with `"unique_until":"start"` as its last member, written as
/// redjob writes it (no whitespace): an envelope (a JSON object) gets it at
/// its end, in place of the one it ends with already in another spacing
/// (`"unique_until": "start" }`); any other body is copied as it is.
pub(crate) fn with_unique_until_start(body: &[u8]) -> Vec<u8> {
    let open = match until_start_member(body) {
        Some(before) => before,
        None => match body.trim_ascii_end().strip_suffix(b"}") {
            Some(open) => open,
            None => return body.to_vec(),
        },
    };
    let open = open.trim_ascii_end();
    let mut out = open.to_vec();
    if !open.ends_with(b"{") {
        out.push(b',');
    }
    out.extend_from_slice(UNTIL_START);
    out
}

/// Whether a stored body's envelope ends with the member
/// `"unique_until":"start"`, with or without JSON whitespace around its
/// colon and before the closing brace (as Python's `json.dumps` writes it):
/// its job frees its unique key as its run starts. A look at the body's last
/// bytes, whatever its size: a worker asks it of every job it starts.
pub(crate) fn unique_until_start(body: &[u8]) -> bool {
    until_start_member(body).is_some()
}

/// The body's text before its last member `"unique_until": "start"` and the
/// comma before it (the text up to and with the opening brace when it is the
/// only member), if it ends with that member; read from the end, through
/// JSON whitespace between the tokens.
fn until_start_member(body: &[u8]) -> Option<&[u8]> {
    /// `t` without the JSON whitespace it ends with.
    fn ws(t: &[u8]) -> &[u8] {
        let keep = t
            .iter()
            .rposition(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .map_or(0, |i| i + 1);
        &t[..keep]
    }
    let t = ws(body).strip_suffix(b"}")?;
    let t = ws(t).strip_suffix(br#""start""#)?;
    let t = ws(t).strip_suffix(b":")?;
    let t = ws(t).strip_suffix(br#""unique_until""#)?;
    // in JSON, a quoted name that follows a comma or an opening brace (a
    // quote inside a string is escaped, so these are tokens) is a member's
    // name, and one whose value is followed by the closing brace at the very
    // end is the envelope's own last member
    let t = ws(t);
    match t.last()? {
        b',' => Some(&t[..t.len() - 1]),
        b'{' => Some(t),
        _ => None,
    }
}

/// A copy of `body` that names `id` as the job it retries: an envelope (a JSON
/// object) gets a last member `"retry_of": "<id>"` (written at its end, so its
/// `"type"` stays first), in place of the one a copy has already (a copy of a
/// copy names the copy); any other body is copied as it is.
pub(crate) fn with_retry_of(body: &[u8], id: &crate::JobId) -> Vec<u8> {
    let is_object =
        serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body).is_ok();
    let trimmed = body.trim_ascii_end();
    match trimmed.strip_suffix(b"}") {
        Some(open) if is_object => {
            let open = without_retry_of(open);
            let empty = open.trim_ascii_end().ends_with(b"{");
            let mut out = open.to_vec();
            if !empty {
                out.push(b',');
            }
            out.extend_from_slice(format!(r#""retry_of":"{id}"}}"#).as_bytes());
            out
        }
        _ => body.to_vec(),
    }
}

/// `open`, an object's text without its closing brace, without the last
/// member `with_retry_of` wrote (`"retry_of":"<id>"` and the comma before
/// it), if it ends with one. Quotes inside a JSON string are escaped, so the
/// member's text found at the end is the object's own last member.
fn without_retry_of(open: &[u8]) -> &[u8] {
    const MEMBER: &[u8] = br#""retry_of":""#;
    let t = open.trim_ascii_end();
    let Some(value) = t.strip_suffix(b"\"") else {
        return open;
    };
    let Some(at) = value.windows(MEMBER.len()).rposition(|w| w == MEMBER) else {
        return open;
    };
    let named = std::str::from_utf8(&value[at + MEMBER.len()..]).ok();
    if named.and_then(|n| n.parse::<crate::JobId>().ok()).is_none() {
        return open;
    }
    let before = value[..at].trim_ascii_end();
    match before.last() {
        Some(b',') => &before[..before.len() - 1],
        Some(b'{') => before,
        _ => open,
    }
}

/// The job an envelope says it retries (see [`with_retry_of`]).
/// A body with the member twice (a copy of a copy before redjob replaced it)
/// names the last.
pub(crate) fn retry_of(body: &[u8]) -> Option<crate::JobId> {
    #[derive(serde::Deserialize)]
    struct Link {
        retry_of: Option<String>,
    }
    let named = match serde_json::from_slice::<Link>(body) {
        Ok(link) => link.retry_of?,
        // (a struct refuses a member given twice; a map keeps the last)
        Err(_) => match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body)
            .ok()?
            .remove("retry_of")?
        {
            serde_json::Value::String(s) => s,
            _ => return None,
        },
    };
    named.parse().ok()
}

#[cfg(test)]
mod until_tests {
    use super::*;

    #[test]
    fn the_unique_until_member_is_written_last_once_and_read_only_there() {
        let body = with_unique_until_start(br#"{"type":"Mail","args":{"to":1}}"#);
        assert_eq!(
            String::from_utf8_lossy(&body),
            r#"{"type":"Mail","args":{"to":1},"unique_until":"start"}"#
        );
        assert!(unique_until_start(&body));
        assert_eq!(with_unique_until_start(&body), body, "written once");
        assert_eq!(job_name(&body).as_deref(), Some("Mail"));
        assert!(unique_until_start(&with_unique_until_start(b"{ } ")));
        assert_eq!(with_unique_until_start(b"plain"), b"plain");
        for not in [
            &br#"{"type":"Mail","args":{"to":1}}"#[..],
            br#"{"type":"Mail","args":{"unique_until":"start"}}"#,
            br#"{"type":"Mail","args":"x\"unique_until":"start"}"#,
            br#""unique_until":"start"}"#,
            b"",
        ] {
            assert!(!unique_until_start(not), "{}", String::from_utf8_lossy(not));
        }
    }

    #[test]
    fn the_unique_until_member_is_read_in_any_json_spacing_and_written_compact() {
        let compact = br#"{"type":"Mail","args":{"to":1},"unique_until":"start"}"#;
        for spaced in [
            // Python's json.dumps
            &br#"{"type": "Mail", "args": {"to": 1}, "unique_until": "start"}"#[..],
            br#"{"type":"Mail","args":{"to":1} , "unique_until" : "start" }"#,
            b"{\"type\":\"Mail\",\"args\":{\"to\":1},\n\t\"unique_until\":\r\n\"start\"\n}\n",
            br#"{ "unique_until": "start" }"#,
        ] {
            let text = String::from_utf8_lossy(spaced);
            assert!(unique_until_start(spaced), "{text}");
            let written = with_unique_until_start(spaced);
            assert!(unique_until_start(&written), "{text}");
            let members = String::from_utf8_lossy(&written)
                .matches("unique_until")
                .count();
            assert_eq!(members, 1, "written once: {text}");
            assert!(
                written.ends_with(br#","unique_until":"start"}"#)
                    || written == br#"{"unique_until":"start"}"#,
                "{text}"
            );
        }
        let spaced = br#"{"type": "Mail", "args": {"to": 1}, "unique_until": "start"}"#;
        assert_eq!(
            String::from_utf8_lossy(&with_unique_until_start(spaced)),
            r#"{"type": "Mail", "args": {"to": 1},"unique_until":"start"}"#
        );
        assert_eq!(with_unique_until_start(compact), compact);
        for not in [
            &br#"{"type": "Mail", "args": {"unique_until": "start"}}"#[..],
            br#"{"type": "Mail", "args": "x\", \"unique_until\": \"start"}"#,
            br#"{"type": "Mail", "args": {}, "unique_until": "done"}"#,
            br#"{"type": "Mail", "args": {}, "unique_until": "start" } x"#,
        ] {
            assert!(!unique_until_start(not), "{}", String::from_utf8_lossy(not));
        }
    }
}

#[cfg(test)]
mod retry_tests {
    use super::*;

    #[test]
    fn a_copy_names_the_job_it_retries_and_keeps_its_type_first() {
        let id: crate::JobId = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
        let copy = with_retry_of(br#"{"type":"Mail","args":{"to":1}} "#, &id);
        assert!(copy.starts_with(br#"{"type":"Mail""#));
        assert_eq!(retry_of(&copy), Some(id));
        assert_eq!(job_name(&copy).as_deref(), Some("Mail"));
        assert_eq!(retry_of(&with_retry_of(b"{}", &id)), Some(id));
        assert_eq!(with_retry_of(b"plain text", &id), b"plain text");
        assert_eq!(retry_of(b"[1]"), None);
        let twice = format!(
            r#"{{"type":"M","retry_of":"{id}","retry_of":"0000000000zyxwvutsrqponmlkjihgfe"}}"#
        );
        assert_eq!(
            retry_of(twice.as_bytes()).map(|i| i.to_string()).as_deref(),
            Some("0000000000zyxwvutsrqponmlkjihgfe")
        );
        // a copy of a copy names the copy, once
        let other: crate::JobId = "0000000000zyxwvutsrqponmlkjihgfe".parse().unwrap();
        let again = with_retry_of(&copy, &other);
        assert_eq!(retry_of(&again), Some(other));
        assert_eq!(
            String::from_utf8_lossy(&again).matches("retry_of").count(),
            1,
            "{}",
            String::from_utf8_lossy(&again)
        );
        let want = format!(r#"{{"type":"Mail","args":{{"to":1}},"retry_of":"{other}"}}"#);
        assert_eq!(String::from_utf8_lossy(&again), want);
        let bare = with_retry_of(&with_retry_of(b"{ }", &id), &other);
        assert_eq!(bare, format!(r#"{{"retry_of":"{other}"}}"#).as_bytes());
        // a member of that name elsewhere, or naming no job, stays
        let inner = br#"{"type":"M","args":{"retry_of":"0000000000abcdefghijklmnopqrstuv"}}"#;
        assert_eq!(
            String::from_utf8_lossy(&with_retry_of(inner, &other))
                .matches("retry_of")
                .count(),
            2
        );
    }
}
