//! Log lines captured from `tracing` (for the tests that check what the
//! worker logs; `#[path = "common/logs.rs"] mod logs;`, apart from
//! `common`, which the CLI's tests share without `tracing`).

/// Log lines, as a `tracing_subscriber::fmt` writer.
#[derive(Clone, Default)]
pub struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Lines {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// A subscriber that writes here (plain text), for
    /// `tracing::subscriber::set_default` on a test's one-thread runtime.
    pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + use<> {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish()
    }
}

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
