//! JSON written no deeper than it is read back: `serde_json`'s reader refuses
//! a value nested deeper than 127 arrays and objects (its recursion limit),
//! so a job or event whose body is deeper would be stored, then dead-lettered
//! by every worker as undecodable. The writer counts the levels as it goes and
//! refuses such a value at the send instead, and refuses a float JSON cannot
//! hold in the same pass (see `finite.rs`).

use std::io;

use serde::Serialize;

/// The deepest nesting `serde_json` reads back, counting the outermost array
/// or object as 1.
pub(crate) const MAX_DEPTH: usize = 127;

/// `value` as compact JSON, as `serde_json::to_vec` writes it, or an error
/// when it nests deeper than [`MAX_DEPTH`] or holds a NaN or infinite float
/// (which `serde_json` would write as a `null` no reader takes for a float).
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    let mut deepest = 0;
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        Levels {
            depth: 0,
            deepest: &mut deepest,
        },
    );
    value.serialize(super::finite::Finite(&mut ser))?;
    if deepest > MAX_DEPTH {
        return Err(serde::ser::Error::custom(format!(
            "nested {deepest} levels deep: a worker reads at most {MAX_DEPTH} (serde_json's recursion limit), so it could never run"
        )));
    }
    Ok(out)
}

/// The compact formatter, counting arrays and objects open.
struct Levels<'a> {
    depth: usize,
    deepest: &'a mut usize,
}

impl Levels<'_> {
    fn open<W: ?Sized + io::Write>(&mut self, w: &mut W, b: &[u8]) -> io::Result<()> {
        self.depth += 1;
        *self.deepest = (*self.deepest).max(self.depth);
        w.write_all(b)
    }

    fn close<W: ?Sized + io::Write>(&mut self, w: &mut W, b: &[u8]) -> io::Result<()> {
        self.depth = self.depth.saturating_sub(1);
        w.write_all(b)
    }
}

impl serde_json::ser::Formatter for Levels<'_> {
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::MAX_DEPTH;

    fn nested(levels: usize) -> Value {
        (1..levels).fold(Value::Array(vec![]), |v, _| Value::Array(vec![v]))
    }

    #[test]
    fn what_is_written_reads_back_and_one_level_more_is_refused() {
        for levels in [1, 2, MAX_DEPTH - 1, MAX_DEPTH] {
            let written = super::to_vec(&nested(levels)).unwrap();
            assert_eq!(written, serde_json::to_vec(&nested(levels)).unwrap());
            let read: Value = serde_json::from_slice(&written).unwrap();
            assert_eq!(read, nested(levels));
        }
        let deeper = super::to_vec(&nested(MAX_DEPTH + 1)).unwrap_err();
        assert!(
            deeper.to_string().contains("nested 128 levels deep"),
            "{deeper}"
        );
        // serde_json's reader refuses it indeed
        let plain = serde_json::to_vec(&nested(MAX_DEPTH + 1)).unwrap();
        assert!(serde_json::from_slice::<Value>(&plain).is_err());
    }

    #[test]
    fn objects_count_as_levels_and_closing_ones_frees_them() {
        let v = serde_json::json!({"a": {"b": [1, {"c": 2}]}, "d": [[[]]]});
        super::to_vec(&v).unwrap();
        let mut deepest = 0;
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(
            &mut out,
            super::Levels {
                depth: 0,
                deepest: &mut deepest,
            },
        );
        serde::Serialize::serialize(&v, &mut ser).unwrap();
        assert_eq!(deepest, 4);
        assert_eq!(out, serde_json::to_vec(&v).unwrap());
    }
}
