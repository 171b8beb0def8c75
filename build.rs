//! Makes the guide's chapters (docs/*.md, included as the `guide` modules)
//! link to each other on docs.rs too: a link to a chapter's file
//! (`topics.md#ordered`) becomes an intra-doc link to its module
//! (`crate::guide::topics#ordered`); the files in docs/ keep their relative
//! links, which GitHub follows.

use std::path::Path;

/// Each chapter's file stem and its module under `guide`.
const CHAPTERS: [(&str, &str); 10] = [
    ("getting-started", "getting_started"),
    ("jobs", "jobs"),
    ("handlers", "handlers"),
    ("history", "history"),
    ("operating", "operating"),
    ("topics", "topics"),
    ("testing", "testing"),
    ("scale-out", "scale_out"),
    ("layout", "layout"),
    ("reliability", "reliability"),
];

/// Where a link to `target` goes on docs.rs, when it is a chapter (or the
/// guide's index).
fn intra_doc(target: &str) -> Option<String> {
    let (file, anchor) = match target.split_once('#') {
        Some((f, a)) => (f, format!("#{a}")),
        None => (target, String::new()),
    };
    let stem = file.strip_suffix(".md")?;
    if stem == "guide" {
        return Some(format!("crate::guide{anchor}"));
    }
    let (_, module) = CHAPTERS.iter().find(|(s, _)| *s == stem)?;
    Some(format!("crate::guide::{module}{anchor}"))
}

/// `text` with every `](chapter.md…)` link rewritten.
fn rewrite(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let (before, after) = rest.split_at(at + 2);
        out.push_str(before);
        match after
            .find(')')
            .and_then(|end| Some((end, intra_doc(&after[..end])?)))
        {
            Some((end, link)) => {
                out.push_str(&link);
                rest = &after[end..];
            }
            None => rest = after,
        }
    }
    out.push_str(rest);
    out
}

fn main() {
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("guide");
    std::fs::create_dir_all(&out).expect("OUT_DIR is writable");
    for (stem, _) in CHAPTERS {
        let src = format!("docs/{stem}.md");
        println!("cargo::rerun-if-changed={src}");
        let text = std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{src}: {e}"));
        std::fs::write(out.join(format!("{stem}.md")), rewrite(&text))
            .expect("OUT_DIR is writable");
    }
}
