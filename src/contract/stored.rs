//! Numbers in the settings stored in Redis, read as the scripts read them.

/// A stored setting's number as the scripts read it (Lua's `%d+`): ASCII
/// digits only, so that `+5`, which Rust's `parse` takes, is no number to
/// either.
pub(crate) fn digits<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::digits;

    #[test]
    fn only_digits_are_a_number() {
        assert_eq!(digits::<u32>("0042"), Some(42));
        for odd in ["", "+5", "-5", " 5", "5 ", "5x", "1e3"] {
            assert_eq!(digits::<u32>(odd), None, "{odd:?}");
        }
        // too large for the type: none, as Rust's parse says
        assert_eq!(digits::<u32>("4294967296"), None);
    }
}
