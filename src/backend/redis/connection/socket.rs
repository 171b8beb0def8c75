//! A lane's socket: opened and authenticated as the managed connection's,
//! written and read by the calling task, its replies read by [`resp`].

use std::pin::Pin;
use std::task::{Context, Waker};

use redis::{Cmd, ConnectionAddr, ConnectionInfo, RedisResult, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::resp;

pub(super) trait Io: AsyncRead + AsyncWrite + Send + Sync + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin> Io for T {}

pub(super) struct Socket {
    io: Box<dyn Io>,
    /// Bytes read and not yet taken by a reply (from `start` on).
    buf: Vec<u8>,
    start: usize,
    scan: resp::Scan,
}

/// Whether a socket of ours can speak for a client of `info`: a plain TCP
/// or Unix socket speaking RESP2. TLS streams are the `redis` crate's to
/// open, and RESP3's pushes need its multiplexer.
pub(super) fn speaks_for(info: &ConnectionInfo) -> bool {
    matches!(
        info.addr(),
        ConnectionAddr::Tcp(..) | ConnectionAddr::Unix(_)
    ) && matches!(
        info.redis_settings().protocol(),
        redis::ProtocolVersion::RESP2
    )
}

impl Socket {
    /// Connects and authenticates as the managed connection does (`AUTH`, then
    /// `SELECT` for a database other than 0), then checks with a `PING` that
    /// the server serves it (one at its client limit accepts, answers with an
    /// error and closes).
    pub async fn open(info: &ConnectionInfo) -> RedisResult<Socket> {
        let io: Box<dyn Io> = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                tcp.set_nodelay(true)?;
                Box::new(tcp)
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
            _ => return Err(std::io::Error::other("no lane for this address").into()),
        };
        let mut socket = Socket::over(io);
        let settings = info.redis_settings();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            if let Err(e) = socket.expect_ok(&auth).await {
                // Redis before 6 knows no users: the password alone, as the
                // redis crate does then
                let old_server = e.to_string().contains("wrong number of arguments");
                if !(old_server && settings.username().is_some()) {
                    return Err(e);
                }
                socket.expect_ok(redis::cmd("AUTH").arg(password)).await?;
            }
        }
        if settings.db() != 0 {
            socket
                .expect_ok(redis::cmd("SELECT").arg(settings.db()))
                .await?;
        }
        socket.expect_ok(&redis::cmd("PING")).await?;
        Ok(socket)
    }

    /// A socket over `io`, nothing read yet.
    pub fn over(io: Box<dyn Io>) -> Socket {
        Socket {
            io,
            buf: Vec::new(),
            start: 0,
            scan: resp::Scan::default(),
        }
    }

    /// Whether the server closed the socket (or sent what nobody asked for)
    /// while it sat idle: one non-blocking read.
    pub fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(&mut self.io)
            .poll_read(&mut cx, &mut buf)
            .is_ready()
    }

    /// Writes `packed` and reads `replies` replies.
    pub async fn exchange(&mut self, packed: &[u8], replies: usize) -> RedisResult<Vec<Value>> {
        self.io.write_all(packed).await?;
        let mut out = Vec::with_capacity(replies);
        for _ in 0..replies {
            out.push(self.read().await?);
        }
        // what the replies took goes; a byte more would be an unasked reply
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            // a large reply's room is not kept for the lane's life
            if self.buf.capacity() > 1 << 20 {
                self.buf = Vec::new();
            }
        }
        Ok(out)
    }

    /// Writes `packed` (commands whose replies [`read`](Self::read) takes).
    pub async fn send(&mut self, packed: &[u8]) -> RedisResult<()> {
        Ok(self.io.write_all(packed).await?)
    }

    /// The next reply (or message, on a subscribed socket), read as it
    /// arrives. Cancel-safe: bytes read before a cancel stay for the next call.
    pub async fn read(&mut self) -> RedisResult<Value> {
        loop {
            if let Some(v) = self.buffered() {
                return v;
            }
            if self.start == self.buf.len() {
                self.buf.clear();
                self.start = 0;
                // a large message's room is not kept for a reader's life
                if self.buf.capacity() > 1 << 20 {
                    self.buf = Vec::new();
                }
            } else if self.start >= 64 * 1024 {
                // a long-lived reader keeps only what is not yet taken
                self.buf.drain(..self.start);
                self.start = 0;
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(16 * 1024);
            }
            if self.io.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
            }
        }
    }

    /// A reply already read whole from the socket, without reading more.
    pub fn buffered(&mut self) -> Option<RedisResult<Value>> {
        let end = match self.scan.end(&self.buf, self.start) {
            Ok(Some(end)) => end,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let mut pos = self.start;
        let v = resp::value(&self.buf[..end], &mut pos);
        self.start = end;
        Some(v)
    }

    /// Whether bytes are left that no call asked for.
    pub fn leftover(&self) -> bool {
        self.start < self.buf.len()
    }

    pub async fn expect_ok(&mut self, cmd: &Cmd) -> RedisResult<()> {
        let reply = self.exchange(&cmd.get_packed_command(), 1).await?;
        match reply.into_iter().next() {
            Some(Value::Okay) => Ok(()),
            Some(other) => other.extract_error().map(drop),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::Socket;

    fn socket(io: tokio::io::DuplexStream) -> Socket {
        Socket::over(Box::new(io))
    }

    #[tokio::test]
    async fn replies_that_arrive_together_or_in_pieces_are_each_read_once() {
        let (ours, mut server) = tokio::io::duplex(64);
        let mut s = socket(ours);
        // two replies in one write, for a pipeline of two
        let call = tokio::spawn(async move {
            let got = s.exchange(b"*1\r\n$4\r\nPING\r\n", 2).await.unwrap();
            (s, got)
        });
        let mut asked = [0u8; 14];
        server.read_exact(&mut asked).await.unwrap();
        server.write_all(b"+PONG\r\n:7\r\n").await.unwrap();
        let (mut s, got) = call.await.unwrap();
        assert_eq!(got, [Value::SimpleString("PONG".into()), Value::Int(7)]);
        assert!(!s.leftover());
        // a reply in pieces, then one more byte than asked for
        let call = tokio::spawn(async move {
            let got = s.exchange(b"x", 1).await.unwrap();
            (s, got)
        });
        server.read_exact(&mut [0u8; 1]).await.unwrap();
        server.write_all(b"$5\r\nhel").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        server.write_all(b"lo\r\n+").await.unwrap();
        let (s, got) = call.await.unwrap();
        assert_eq!(got, [Value::BulkString(b"hello".to_vec())]);
        assert!(s.leftover(), "the unasked byte is noticed");
    }

    #[tokio::test]
    async fn a_long_lived_reader_does_not_keep_a_large_messages_room() {
        let (ours, mut server) = tokio::io::duplex(64 * 1024);
        let mut s = socket(ours);
        let big = vec![b'x'; 2 << 20];
        let writer = tokio::spawn(async move {
            server
                .write_all(format!("${}\r\n", big.len()).as_bytes())
                .await
                .unwrap();
            server.write_all(&big).await.unwrap();
            server.write_all(b"\r\n").await.unwrap();
            server
        });
        assert!(matches!(s.read().await.unwrap(), Value::BulkString(b) if b.len() == 2 << 20));
        assert!(s.buf.capacity() >= 2 << 20);
        let mut server = writer.await.unwrap();
        server.write_all(b"+small\r\n").await.unwrap();
        assert_eq!(s.read().await.unwrap(), Value::SimpleString("small".into()));
        assert!(s.buf.capacity() < 1 << 20, "{}", s.buf.capacity());
    }

    #[tokio::test]
    async fn a_socket_the_server_closed_mid_reply_is_an_error() {
        let (ours, mut server) = tokio::io::duplex(64);
        let mut s = socket(ours);
        let call = tokio::spawn(async move { s.exchange(b"x", 1).await });
        server.read_exact(&mut [0u8; 1]).await.unwrap();
        server.write_all(b"$5\r\nhe").await.unwrap();
        drop(server);
        assert!(call.await.unwrap().is_err());
    }
}
