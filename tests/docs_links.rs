//! The documents' relative links: every `[text](target)` in README.md,
//! CHANGELOG.md, RELIABILITY.md, BENCHMARKS.md, examples/README.md and
//! docs/*.md that is not a URL or a rustdoc path names a file that exists,
//! and its `#anchor` (or a link within the page) names a heading there, as
//! GitHub makes anchors of headings. Code blocks are skipped.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The documents to check, relative to the crate's root.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = [
        "README.md",
        "CHANGELOG.md",
        "RELIABILITY.md",
        "BENCHMARKS.md",
        "examples/README.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    out.extend(chapters);
    out
}

/// The text outside fenced code blocks, line by line.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation
/// (other than `-` and `_`) dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The anchors of a document's headings.
fn anchors(text: &str) -> HashSet<String> {
    prose(text)
        .iter()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// The targets of the inline links of a line (`](target)`), leaving out
/// inline code.
fn targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    // inline code cannot hold a link
    let mut clean = String::new();
    let mut code = false;
    for c in line.chars() {
        if c == '`' {
            code = !code;
        } else if !code {
            clean.push(c);
        }
    }
    let mut rest = clean.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn relative_links_and_anchors_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents(root) {
        let text = std::fs::read_to_string(&doc).unwrap();
        let dir = doc.parent().unwrap();
        for line in prose(&text) {
            for target in targets(line) {
                let target = target.split_whitespace().next().unwrap_or("").to_string();
                if target.is_empty()
                    || target.contains("://")
                    || target.starts_with("mailto:")
                    || target.contains("::")
                {
                    continue;
                }
                checked += 1;
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() {
                    doc.clone()
                } else {
                    dir.join(file)
                };
                if !path.exists() {
                    broken.push(format!("{}: {target}: no such file", doc.display()));
                    continue;
                }
                if let Some(anchor) = anchor {
                    let there = std::fs::read_to_string(&path).unwrap_or_default();
                    if !anchors(&there).contains(anchor) {
                        broken.push(format!("{}: {target}: no such heading", doc.display()));
                    }
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: the parser misses them"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(
        slug(" What is built, what is not"),
        "what-is-built-what-is-not"
    );
    assert_eq!(
        slug(" Operating: pause, `redjob` CLI"),
        "operating-pause-redjob-cli"
    );
    assert_eq!(targets("see [a](b.md#c) and `[x](y)`"), ["b.md#c"]);
}

/// The layout chapter shows the very files the interop tests run: each one's
/// whole text, in a code block of its own.
#[test]
fn the_layout_chapter_shows_the_interop_files_as_they_are() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let chapter = std::fs::read_to_string(root.join("docs/layout.md")).unwrap();
    let files = [
        ("python", "docs/interop/python/enqueue_job.py"),
        ("python", "docs/interop/python/driver.py"),
        ("text", "docs/interop/python/requirements.txt"),
        ("js", "docs/interop/node/driver.js"),
        ("js", "docs/interop/node/topics.js"),
    ];
    for (lang, file) in files {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(text.ends_with('\n'), "{file} ends with a newline");
        let shown = format!("`{file}`:\n\n```{lang}\n{text}```\n");
        assert!(
            chapter.contains(&shown),
            "docs/layout.md does not show {file} as it is (update the chapter's copy)"
        );
    }
}
