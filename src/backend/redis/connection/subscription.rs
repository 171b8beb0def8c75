//! A subscription read by the task that listens on it.
//!
//! The `redis` crate's pub/sub connection is driven by a task of its own,
//! which reads each message and passes it on to the listening task through a
//! channel: one wake-up between tasks per message, which a worker's hand-offs
//! waited for (on the 2-core bench, reading the socket in the listener took
//! a few µs off a hand-off's start: BENCHMARKS.md, Speed II part 15).
//! Where a lane could speak for the client (a plain TCP or Unix socket,
//! RESP2: see [`socket::speaks_for`]) the listener reads the socket itself;
//! elsewhere (TLS, RESP3) it takes the `redis` crate's connection.
//!
//! Confirmations (of a subscription, an unsubscription, a `PING`) come on the
//! same socket as the messages, in order: the messages read while one is
//! awaited are held, and come first from [`Subscription::next`].

use std::collections::VecDeque;

use futures::{FutureExt, StreamExt};
use redis::{ErrorKind, Msg, RedisError, RedisResult, Value};

use super::socket::{self, Socket};

/// A connection in subscribed mode.
pub(crate) struct Subscription(Kind);

enum Kind {
    /// Read by the listening task itself.
    Own {
        socket: Box<Socket>,
        /// Messages read while a confirmation was awaited.
        held: VecDeque<Msg>,
    },
    /// The `redis` crate's, driven by its task.
    Crate {
        sink: redis::aio::PubSubSink,
        stream: redis::aio::PubSubStream,
    },
}

/// What comes on a subscribed socket.
enum Frame {
    Message(Msg),
    /// A subscription or unsubscription confirmed, and its channel.
    Confirmed(&'static str, Vec<u8>),
    Pong,
    /// Anything else: a pattern's message (none is asked for), an unknown kind.
    Other,
}

impl Subscription {
    /// A subscription connection for `client` (not yet subscribed to anything).
    pub async fn open(client: &redis::Client) -> RedisResult<Subscription> {
        let info = client.get_connection_info();
        if socket::speaks_for(info) {
            return Ok(Subscription(Kind::Own {
                socket: Box::new(Socket::open(info).await?),
                held: VecDeque::new(),
            }));
        }
        let (sink, stream) = client.get_async_pubsub().await?.split();
        Ok(Subscription(Kind::Crate { sink, stream }))
    }

    /// Subscribes to `channel`; returns once Redis confirmed it (or refused it:
    /// the error).
    pub async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match &mut self.0 {
            Kind::Own { socket, held } => {
                confirmed_command(socket, held, "subscribe", channel).await
            }
            Kind::Crate { sink, .. } => sink.subscribe(channel).await,
        }
    }

    /// Unsubscribes from `channel`; returns once Redis confirmed it, when
    /// every message published there before was read.
    pub async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match &mut self.0 {
            Kind::Own { socket, held } => {
                confirmed_command(socket, held, "unsubscribe", channel).await
            }
            Kind::Crate { sink, .. } => sink.unsubscribe(channel).await,
        }
    }

    /// A `PING`, answered.
    pub async fn ping(&mut self) -> RedisResult<()> {
        match &mut self.0 {
            Kind::Own { socket, held } => {
                socket
                    .send(&redis::cmd("PING").get_packed_command())
                    .await?;
                confirmed(socket, held, |f| matches!(f, Frame::Pong)).await
            }
            Kind::Crate { sink, .. } => sink.ping::<Value>().await.map(drop),
        }
    }

    /// The next message; an error once the connection failed or closed.
    /// Cancel-safe.
    pub async fn next(&mut self) -> RedisResult<Msg> {
        match &mut self.0 {
            Kind::Own { socket, held } => {
                if let Some(m) = held.pop_front() {
                    return Ok(m);
                }
                loop {
                    match frame(socket.read().await?)? {
                        Frame::Message(m) => return Ok(m),
                        // a late confirmation (one awaited was given up)
                        Frame::Confirmed(..) | Frame::Pong | Frame::Other => {}
                    }
                }
            }
            Kind::Crate { stream, .. } => stream.next().await.ok_or_else(|| {
                RedisError::from(std::io::Error::from(std::io::ErrorKind::UnexpectedEof))
            }),
        }
    }

    /// A message already read from the connection, without reading more (what
    /// came before it failed or was stopped).
    pub fn read_already(&mut self) -> Option<Msg> {
        match &mut self.0 {
            Kind::Own { socket, held } => {
                if let Some(m) = held.pop_front() {
                    return Some(m);
                }
                while let Some(Ok(v)) = socket.buffered() {
                    if let Ok(Frame::Message(m)) = frame(v) {
                        return Some(m);
                    }
                }
                None
            }
            Kind::Crate { stream, .. } => stream.next().now_or_never().flatten(),
        }
    }
}

/// Reads until a frame `wanted` says is the one awaited, holding the messages
/// read before it; an error reply is the awaited command's.
async fn confirmed(
    socket: &mut Socket,
    held: &mut VecDeque<Msg>,
    wanted: impl Fn(&Frame) -> bool,
) -> RedisResult<()> {
    loop {
        let f = frame(socket.read().await?)?;
        if wanted(&f) {
            return Ok(());
        }
        if let Frame::Message(m) = f {
            held.push_back(m);
        }
    }
}

/// `SUBSCRIBE` or `UNSUBSCRIBE` (`kind` in lower case, as its confirmation
/// names it) of `channel`, sent and confirmed.
async fn confirmed_command(
    socket: &mut Socket,
    held: &mut VecDeque<Msg>,
    kind: &'static str,
    channel: &str,
) -> RedisResult<()> {
    let cmd = redis::cmd(&kind.to_ascii_uppercase())
        .arg(channel)
        .get_packed_command();
    socket.send(&cmd).await?;
    confirmed(
        socket,
        held,
        |f| matches!(f, Frame::Confirmed(k, ch) if *k == kind && ch == channel.as_bytes()),
    )
    .await
}

/// What a value read on a subscribed RESP2 socket is; an error reply as the
/// error.
fn frame(v: Value) -> RedisResult<Frame> {
    let items = match v {
        Value::Array(items) => items,
        Value::ServerError(e) => return Err(e.into()),
        _ => return Ok(Frame::Other),
    };
    let kind = match items.first() {
        Some(Value::BulkString(k)) => k.as_slice(),
        _ => return Ok(Frame::Other),
    };
    Ok(match kind {
        b"message" => match Msg::from_owned_value(Value::Array(items)) {
            Some(m) => Frame::Message(m),
            None => {
                return Err(RedisError::from((
                    ErrorKind::Parse,
                    "a pub/sub message without its channel or payload",
                )));
            }
        },
        b"subscribe" | b"unsubscribe" => {
            let kind = if kind == b"subscribe" {
                "subscribe"
            } else {
                "unsubscribe"
            };
            match items.into_iter().nth(1) {
                Some(Value::BulkString(ch)) => Frame::Confirmed(kind, ch),
                _ => Frame::Other,
            }
        }
        b"pong" => Frame::Pong,
        _ => Frame::Other,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::{Kind, Socket, Subscription};

    fn own(io: tokio::io::DuplexStream) -> Subscription {
        Subscription(Kind::Own {
            socket: Box::new(Socket::over(Box::new(io))),
            held: VecDeque::new(),
        })
    }

    fn message(channel: &str, payload: &str) -> String {
        format!(
            "*3\r\n$7\r\nmessage\r\n${}\r\n{channel}\r\n${}\r\n{payload}\r\n",
            channel.len(),
            payload.len()
        )
    }

    #[tokio::test]
    async fn messages_read_while_a_confirmation_is_awaited_come_first_and_in_order() {
        let (ours, mut server) = tokio::io::duplex(1024);
        let mut sub = own(ours);
        let call = tokio::spawn(async move {
            sub.subscribe("b").await.unwrap();
            sub
        });
        let mut asked = [0u8; 26];
        server.read_exact(&mut asked).await.unwrap();
        assert_eq!(&asked, b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nb\r\n");
        // a message on a channel subscribed before, then the confirmation of
        // another channel's (ignored), then the one awaited and a message on it
        let mut replies = message("a", "one");
        replies += "*3\r\n$9\r\nsubscribe\r\n$1\r\nz\r\n:1\r\n";
        replies += "*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n";
        replies += &message("b", "two");
        server.write_all(replies.as_bytes()).await.unwrap();
        let mut sub = call.await.unwrap();
        let first = sub.next().await.unwrap();
        assert_eq!(
            (first.get_channel_name(), first.get_payload_bytes()),
            ("a", &b"one"[..])
        );
        // the second was read whole already: it comes without reading more
        let second = sub.read_already().unwrap();
        assert_eq!(
            (second.get_channel_name(), second.get_payload_bytes()),
            ("b", &b"two"[..])
        );
        assert!(sub.read_already().is_none());
    }

    #[tokio::test]
    async fn a_refused_subscription_is_an_error_and_a_pong_answers_a_ping() {
        let (ours, mut server) = tokio::io::duplex(1024);
        let mut sub = own(ours);
        let call = tokio::spawn(async move {
            let refused = sub.subscribe("secret").await;
            (sub, refused)
        });
        server.read_exact(&mut [0u8; 31]).await.unwrap();
        server
            .write_all(b"-NOPERM No permissions to access a channel\r\n")
            .await
            .unwrap();
        let (mut sub, refused) = call.await.unwrap();
        let e = refused.unwrap_err();
        assert_eq!(
            e.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "{e}"
        );
        let call = tokio::spawn(async move {
            sub.ping().await.unwrap();
            sub
        });
        server.read_exact(&mut [0u8; 14]).await.unwrap();
        // a message split across writes before the pong
        let msg = message("a", "split");
        server.write_all(&msg.as_bytes()[..10]).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        server.write_all(&msg.as_bytes()[10..]).await.unwrap();
        server
            .write_all(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n")
            .await
            .unwrap();
        let mut sub = call.await.unwrap();
        assert_eq!(sub.next().await.unwrap().get_payload_bytes(), b"split");
        // the server closes: an error, not a wait
        drop(server);
        assert!(sub.next().await.is_err());
    }

    #[tokio::test]
    async fn a_message_cut_by_a_cancelled_read_is_read_whole_by_the_next() {
        let (ours, mut server) = tokio::io::duplex(1024);
        let mut sub = own(ours);
        let msg = message("q", "payload");
        server.write_all(&msg.as_bytes()[..12]).await.unwrap();
        let cut = tokio::time::timeout(std::time::Duration::from_millis(30), sub.next()).await;
        assert!(cut.is_err(), "half a message is not a message");
        server.write_all(&msg.as_bytes()[12..]).await.unwrap();
        assert_eq!(sub.next().await.unwrap().get_payload_bytes(), b"payload");
    }
}
