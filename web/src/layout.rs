//! The page around every view: head, navigation, theme switch, the note an
//! action left, and the CSRF cookie; and the small pieces pages share (action
//! buttons, tables of counts).

use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use crate::Ctx;
use crate::ctx::{CSRF_COOKIE, NOTE_COOKIE};

/// The section of the navigation a page belongs to.
#[derive(PartialEq, Eq)]
pub(crate) enum Nav {
    Queues,
    Topics,
    Periodic,
    Workers,
    Batches,
}

impl Nav {
    /// The section a path under the dashboard (without its mount point) is in.
    pub(crate) fn of_path(path: &str) -> Nav {
        let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
        match first {
            "topics" => Nav::Topics,
            "periodic" => Nav::Periodic,
            "workers" => Nav::Workers,
            "batches" => Nav::Batches,
            _ => Nav::Queues,
        }
    }
}

/// `body` in the dashboard's page, titled `title`.
pub(crate) fn render(ctx: &Ctx, title: &str, nav: Nav, body: Markup) -> Response {
    render_every(ctx, title, nav, body, ctx.app.refresh)
}

/// [`render`] with its live parts refreshed every `refresh` (zero: never).
pub(crate) fn render_every(
    ctx: &Ctx,
    title: &str,
    nav: Nav,
    body: Markup,
    refresh: std::time::Duration,
) -> Response {
    // a browser takes a longer interval than 2^31 - 1 ms as none at all
    let refresh = refresh.as_millis().min(i32::MAX as u128);
    let item = |to: &str, label: &str, this: Nav| {
        html! {
            a href=(ctx.link(to)) aria-current=[(nav == this).then_some("page")] { (label) }
        }
    };
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · redjob" }
                link rel="stylesheet" href=(ctx.link("/assets/style.css"));
                script src=(ctx.link("/assets/app.js")) defer {}
            }
            body data-refresh=(refresh) {
                header {
                    a.brand href=(ctx.link("/")) { "redjob" }
                    nav {
                        (item("/", "Queues", Nav::Queues))
                        (item("/topics", "Topics", Nav::Topics))
                        (item("/batches", "Batches", Nav::Batches))
                        (item("/periodic", "Periodic", Nav::Periodic))
                        (item("/workers", "Workers", Nav::Workers))
                    }
                    @if let Some(u) = &ctx.user { span.muted title="Signed in as" { (u.name) } }
                    @if ctx.read_only { span.badge { "read-only" } }
                    button #theme type="button" title="Light or dark" aria-label="Switch theme" { "◐" }
                }
                @if let Some(note) = &ctx.note {
                    p.note role="status" { (note) }
                }
                main { (body) }
            }
        }
    };
    let mut response = markup.into_response();
    if ctx.note.is_some() {
        // shown once
        ctx.set_cookie(&mut response, NOTE_COOKIE, "");
    }
    if ctx.new_csrf {
        ctx.set_cookie(&mut response, CSRF_COOKIE, &ctx.csrf);
    }
    response
}

/// The hidden field that carries the CSRF token in a form.
pub(crate) fn csrf(ctx: &Ctx) -> Markup {
    html! { input type="hidden" name="csrf" value=(ctx.csrf); }
}

/// A button that POSTs to `path` (nothing in read-only mode).
pub(crate) fn button(ctx: &Ctx, path: &str, label: &str, class: &str) -> Markup {
    if ctx.read_only {
        return html! {};
    }
    html! {
        form.inline method="post" action=(ctx.link(path)) {
            (csrf(ctx))
            button type="submit" class=(class) { (label) }
        }
    }
}

/// A link styled as a button (to a confirmation page; nothing in read-only mode).
pub(crate) fn link_button(ctx: &Ctx, path: &str, label: &str, class: &str) -> Markup {
    if ctx.read_only {
        return html! {};
    }
    // one class attribute: maud writes `.button` and `class=` as two
    let classes = format!("button {class}");
    html! { a class=(classes.trim_end()) href=(ctx.link(path)) { (label) } }
}

/// A name that may be long (a queue, topic or subscriber name, up to 160
/// characters, a job or event type): cut short by the style (`.name`), whole
/// in its title, which a pointer shows on hover.
pub(crate) fn name(text: &str) -> Markup {
    html! { span.name title=(text) { (text) } }
}

/// A [`name`] that links to `href` (a path from [`Ctx::link`]).
pub(crate) fn name_link(href: &str, text: &str) -> Markup {
    html! { a.name href=(href) title=(text) { (text) } }
}

/// A path segment (queue names and ids are URL-safe already; this keeps a
/// foreign one from breaking a link).
pub(crate) fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A query string from pairs, each value encoded.
pub(crate) fn query(pairs: &[(&str, &str)]) -> String {
    let kept: Vec<(&str, &str)> = pairs
        .iter()
        .copied()
        .filter(|(_, v)| !v.is_empty())
        .collect();
    if kept.is_empty() {
        return String::new();
    }
    format!("?{}", serde_urlencoded::to_string(kept).unwrap_or_default())
}
