//! Commands packed as RESP by hand, for the calls a lane writes as they are
//! (see `Connection::packed`): a lone send and a settle, written once into
//! one buffer rather than into a `redis::Cmd` and packed again from it.
//!
//! [`Args`] lets one builder write the same arguments into a [`Packed`]
//! command and into a `redis::Cmd` (for the multiplexer), so that the two
//! forms cannot drift apart.

use redis::{Cmd, RedisWrite, ToRedisArgs};

/// The room before a command's first argument for what goes in front of it
/// once its arguments are counted: its array header (at most `*` and 20
/// digits and CRLF) and a short command before it (see [`Packed::finish`]).
const ROOM: usize = 64;

/// One command written as RESP as its arguments come: an array of bulk
/// strings, whose header goes in front once [`finish`](Self::finish)ed.
pub(crate) struct Packed {
    buf: Vec<u8>,
    args: usize,
}

impl Packed {
    /// A command with room for `bytes` bytes of arguments.
    pub fn with_capacity(bytes: usize) -> Packed {
        let mut buf = Vec::with_capacity(ROOM + bytes);
        buf.resize(ROOM, 0);
        Packed { buf, args: 0 }
    }

    /// The command, `before` in front of it (whole commands, at most 40
    /// bytes): the bytes to write.
    pub fn finish(&mut self, before: &[u8]) -> &[u8] {
        let mut header = [0u8; 24];
        let n = header.len();
        header[n - 2..].copy_from_slice(b"\r\n");
        let digits = Decimal::of(self.args as u64);
        let d = digits.bytes();
        header[n - 2 - d.len()..n - 2].copy_from_slice(d);
        header[n - 3 - d.len()] = b'*';
        let header = &header[n - 3 - d.len()..];
        assert!(
            before.len() + header.len() <= ROOM,
            "no room before the command"
        );
        let start = ROOM - header.len() - before.len();
        self.buf[start..start + before.len()].copy_from_slice(before);
        self.buf[ROOM - header.len()..ROOM].copy_from_slice(header);
        &self.buf[start..]
    }
}

impl RedisWrite for Packed {
    fn write_arg(&mut self, arg: &[u8]) {
        self.args += 1;
        self.buf.push(b'$');
        self.buf
            .extend_from_slice(Decimal::of(arg.len() as u64).bytes());
        self.buf.extend_from_slice(b"\r\n");
        self.buf.extend_from_slice(arg);
        self.buf.extend_from_slice(b"\r\n");
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        Next {
            to: self,
            arg: Vec::new(),
        }
    }
}

/// An argument written in pieces ([`RedisWrite::writer_for_next_arg`]),
/// added whole when dropped (its length goes before it).
struct Next<'a> {
    to: &'a mut Packed,
    arg: Vec<u8>,
}

impl std::io::Write for Next<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.arg.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Next<'_> {
    fn drop(&mut self) {
        self.to.write_arg(&self.arg);
    }
}

/// What a command's arguments are written into: a `redis::Cmd` or a
/// [`Packed`] command.
pub(crate) trait Args {
    /// Appends `arg`'s arguments.
    fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self;
}

impl Args for Cmd {
    fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        Cmd::arg(self, arg)
    }
}

impl Args for Packed {
    fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(self);
        self
    }
}

/// A number's decimal digits, without the formatter.
pub(crate) struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    pub fn of(mut n: u64) -> Decimal {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Decimal { digits, start }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

#[cfg(test)]
mod tests {
    use super::{Args, Decimal, Packed};

    #[test]
    fn a_packed_command_is_what_redis_packs() {
        for n in [0, 7, 10, 99, 12_345, u64::MAX] {
            assert_eq!(Decimal::of(n).bytes(), n.to_string().as_bytes());
        }
        let body = vec![b'x'; 70_000];
        let mut cmd = redis::cmd("FCALL");
        let mut packed = Packed::with_capacity(16);
        fn args<A: Args>(a: &mut A, body: &[u8]) {
            a.arg("f")
                .arg(2)
                .arg("")
                .arg(body)
                .arg(-3i64)
                .arg(&["k1", "k2"][..]);
        }
        packed.arg("FCALL");
        args(&mut cmd, &body);
        args(&mut packed, &body);
        assert_eq!(packed.finish(b""), cmd.get_packed_command());
        // with a command before it
        let mut both = redis::cmd("TIME").get_packed_command();
        both.extend(cmd.get_packed_command());
        assert_eq!(packed.finish(b"*1\r\n$4\r\nTIME\r\n"), both);
        // an argument written in pieces, and many arguments (a longer header)
        let mut cmd = redis::Cmd::new();
        let mut packed = Packed::with_capacity(0);
        for i in 0..1234 {
            cmd.arg(i);
            packed.arg(i);
        }
        use redis::RedisWrite;
        use std::io::Write;
        write!(cmd.writer_for_next_arg(), "a{}", 1).unwrap();
        write!(packed.writer_for_next_arg(), "a{}", 1).unwrap();
        assert_eq!(packed.finish(b""), cmd.get_packed_command());
    }
}
