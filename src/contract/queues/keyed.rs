//! A keyed message's other options.

use crate::{Error, Result};

/// Checks a keyed message's other options: it runs at priority 0 and is not
/// unique (neither is supported with a key yet).
pub(crate) fn check_message(msg: &super::SendMessage) -> Result<()> {
    let Some(keyed) = &msg.keyed else {
        return Ok(());
    };
    keyed.check()?;
    if msg.priority != 0 {
        return Err(Error::InvalidValue {
            what: "priority",
            reason: format!(
                "{}: a message with a concurrency key runs at priority 0",
                msg.priority
            ),
        });
    }
    if msg.unique.is_some() {
        return Err(Error::InvalidValue {
            what: "unique key",
            reason: "a message with a concurrency key cannot also be unique".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::keyed::{Keyed, MAX_CONCURRENCY_KEY, MAX_PER_KEY};
    use crate::contract::queues::{SendMessage, Unique};

    #[test]
    fn bad_keys_and_options_are_refused() {
        assert!(Keyed::new("a").check().is_ok());
        assert!(Keyed::new("").check().is_err());
        assert!(Keyed::new("a\0b").check().is_err());
        assert!(
            Keyed::new("k".repeat(MAX_CONCURRENCY_KEY + 1))
                .check()
                .is_err()
        );
        assert!(Keyed::new("a").per_key(0).check().is_err());
        assert!(Keyed::new("a").per_key(MAX_PER_KEY + 1).check().is_err());
        assert!(Keyed::new("a").per_key(MAX_PER_KEY).check().is_ok());
        let m = SendMessage::new("x").keyed(Keyed::new("a"));
        assert!(check_message(&m).is_ok());
        assert!(check_message(&m.clone().priority(1)).is_err());
        let u = m.unique(Unique::new("u"));
        assert!(check_message(&u).is_err());
    }
}
