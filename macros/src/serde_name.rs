//! The name serde writes a struct's field under in a job's JSON arguments,
//! read from the `#[serde(...)]` attributes the derive sees beside its own:
//! a field's `rename` (or `rename(serialize = ..)`), else the container's
//! `rename_all` (or `rename_all(serialize = ..)`) applied to the field's name.
//!
//! `#[job(concurrency_key = "...")]` publishes this name (the CLI and
//! non-Rust senders look the key up in the arguments by it), so what the
//! derive cannot tell from the attributes is refused rather than guessed.

use syn::ext::IdentExt;
use syn::{Attribute, Field, LitStr};

/// A `rename_all` rule, as serde spells them.
#[derive(Clone, Copy)]
enum Case {
    Lower,
    Upper,
    Pascal,
    Camel,
    Snake,
    ScreamingSnake,
    Kebab,
    ScreamingKebab,
}

impl Case {
    fn parse(s: &str) -> Option<Case> {
        Some(match s {
            "lowercase" => Case::Lower,
            "UPPERCASE" => Case::Upper,
            "PascalCase" => Case::Pascal,
            "camelCase" => Case::Camel,
            "snake_case" => Case::Snake,
            "SCREAMING_SNAKE_CASE" => Case::ScreamingSnake,
            "kebab-case" => Case::Kebab,
            "SCREAMING-KEBAB-CASE" => Case::ScreamingKebab,
            _ => return None,
        })
    }

    /// A field's name (snake case, as Rust writes it) under this rule.
    fn apply(self, field: &str) -> String {
        match self {
            Case::Lower | Case::Snake => field.to_string(),
            Case::Upper | Case::ScreamingSnake => field.to_ascii_uppercase(),
            Case::Kebab => field.replace('_', "-"),
            Case::ScreamingKebab => field.to_ascii_uppercase().replace('_', "-"),
            Case::Pascal => words_capitalised(field),
            Case::Camel => {
                let pascal = words_capitalised(field);
                let mut chars = pascal.chars();
                chars.next().map_or_else(String::new, |first| {
                    first.to_ascii_lowercase().to_string() + chars.as_str()
                })
            }
        }
    }
}

/// The words between underscores, each with its first letter upper case,
/// joined without them.
fn words_capitalised(field: &str) -> String {
    field
        .split('_')
        .flat_map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase())
                .into_iter()
                .chain(chars)
        })
        .collect()
}

/// What the container's attributes say of its fields' names.
pub struct Container {
    rename_all: Option<Case>,
    /// Why no field's name can be told (`transparent`, `into`).
    refused: Option<&'static str>,
}

/// A field's serialized name, and why it cannot be a key's when it cannot.
pub struct Named {
    pub name: String,
    pub refused: Option<&'static str>,
}

/// The value of `key = "..."`, or of `key(serialize = "...")`, in one
/// `#[serde(...)]` item; `None` for `key(deserialize = "...")` alone.
fn serialize_value(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<Option<LitStr>> {
    if meta.input.peek(syn::Token![=]) {
        return Ok(Some(meta.value()?.parse()?));
    }
    let mut out = None;
    meta.parse_nested_meta(|side| {
        let value: LitStr = side.value()?.parse()?;
        if side.path.is_ident("serialize") {
            out = Some(value);
        }
        Ok(())
    })?;
    Ok(out)
}

/// Skips the value of a serde item this module has no use for (`default`,
/// `bound(...)`, `skip_serializing_if = "..."`).
fn skip_value(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        meta.value()?.parse::<syn::Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        content.parse::<proc_macro2::TokenStream>()?;
    }
    Ok(())
}

/// Calls `each` with every item of every `#[serde(...)]` attribute. One that
/// does not parse is left to serde's own derive, which reports it.
fn serde_items(
    attrs: &[Attribute],
    mut each: impl FnMut(&str, &syn::meta::ParseNestedMeta<'_>) -> syn::Result<()>,
) {
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = attr.parse_nested_meta(|meta| {
            let key = meta
                .path
                .get_ident()
                .map(|i| i.unraw().to_string())
                .unwrap_or_default();
            each(&key, &meta)
        });
    }
}

pub fn container(attrs: &[Attribute]) -> Container {
    let mut out = Container {
        rename_all: None,
        refused: None,
    };
    serde_items(attrs, |key, meta| {
        let why = match key {
            "rename_all" => {
                // an unknown rule is serde's error to report
                out.rename_all = serialize_value(meta)?.and_then(|s| Case::parse(&s.value()));
                return Ok(());
            }
            "transparent" => {
                "`#[serde(transparent)]` sends the job as its one field's value, not as an object with a field to take the key from"
            }
            "into" => {
                "`#[serde(into = \"...\")]` sends the job as another type, whose fields the derive cannot see"
            }
            _ => return skip_value(meta),
        };
        skip_value(meta)?;
        out.refused = Some(why);
        Ok(())
    });
    out
}

pub fn field(container: &Container, field: &Field) -> Named {
    let ident = field.ident.as_ref().map(|i| i.unraw().to_string());
    let mut rename = None;
    let mut refused = container.refused;
    serde_items(&field.attrs, |key, meta| {
        let why = match key {
            "rename" => {
                if let Some(s) = serialize_value(meta)? {
                    rename = Some(s.value());
                }
                return Ok(());
            }
            "flatten" => {
                "a `#[serde(flatten)]` field has no name of its own in the job's arguments"
            }
            "skip" | "skip_serializing" => "a field serde skips is not in the job's arguments",
            "with" | "serialize_with" => {
                "serde writes this field with a function of its own, so its JSON need not be the key the job derives from its value"
            }
            _ => return skip_value(meta),
        };
        skip_value(meta)?;
        refused.get_or_insert(why);
        Ok(())
    });
    let name = rename.unwrap_or_else(|| {
        let ident = ident.unwrap_or_default();
        container
            .rename_all
            .map_or_else(|| ident.clone(), |c| c.apply(&ident))
    });
    Named { name, refused }
}

#[cfg(test)]
mod tests {
    use super::Case;

    #[test]
    fn the_rules_agree_with_serde_on_edge_cases() {
        let all = [
            ("a__b", Case::Pascal, "AB"),
            ("_lead", Case::Camel, "lead"),
            ("trail_", Case::Pascal, "Trail"),
            ("x1_y2", Case::Camel, "x1Y2"),
            ("été_x", Case::Pascal, "étéX"),
            ("a_b", Case::ScreamingKebab, "A-B"),
            ("", Case::Camel, ""),
        ];
        for (field, case, want) in all {
            assert_eq!(case.apply(field), want, "{field}");
        }
    }
}
