//! What became of a request, and the engine's own failures.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;
use std::io;

/// A request's outcome; `name()` is what the records' code table stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The server answered a read with something other than the value written.
    WrongValue,
    /// A read-modify-write lost its race: the key changed after it was read.
    /// A database doing its job, not an error.
    Conflict,
    /// No reply within timeout_s.
    Timeout,
    /// Still in flight when the grace period after a stop ran out.
    Cancelled,
    ConnectionRefused,
    ConnectionReset,
    ConnectionError,
    /// A protocol's own error name (a gRPC status code, a ZooKeeper error).
    Named(&'static str),
    /// An unexpected HTTP status.
    Http(u16),
}

impl Outcome {
    pub fn is_ok(&self) -> bool {
        *self == Outcome::Ok
    }

    /// Whether it counts against the run's error limit.
    pub fn is_error(&self) -> bool {
        !matches!(self, Outcome::Ok | Outcome::Conflict)
    }

    pub fn name(&self) -> Cow<'static, str> {
        match self {
            Outcome::Ok => "ok".into(),
            Outcome::WrongValue => "wrong-value".into(),
            Outcome::Conflict => "conflict".into(),
            Outcome::Timeout => "timeout".into(),
            Outcome::Cancelled => "cancelled".into(),
            Outcome::ConnectionRefused => "connection-refused".into(),
            Outcome::ConnectionReset => "connection-reset".into(),
            Outcome::ConnectionError => "connection-error".into(),
            Outcome::Named(name) => (*name).into(),
            Outcome::Http(status) => format!("HTTP-{status}").into(),
        }
    }

    /// A transport failure, told apart by the first I/O error in its cause
    /// chain (client libraries wrap the socket's error in their own types).
    pub fn from_transport(error: &(dyn StdError + 'static)) -> Outcome {
        let mut cause: Option<&(dyn StdError + 'static)> = Some(error);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                return Outcome::from_io(io);
            }
            cause = e.source();
        }
        Outcome::ConnectionError
    }

    pub fn from_io(error: &io::Error) -> Outcome {
        match error.kind() {
            io::ErrorKind::ConnectionRefused => Outcome::ConnectionRefused,
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof => Outcome::ConnectionReset,
            io::ErrorKind::TimedOut => Outcome::Timeout,
            _ => Outcome::ConnectionError,
        }
    }
}

/// The engine itself could not go on (result() raises RuntimeError with this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineError(pub String);

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for EngineError {}

/// An error and its causes on one line ("a: b: c"), skipping causes whose
/// text the previous message already contains.
pub fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapper(io::Error);

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("transport error")
        }
    }

    impl StdError for Wrapper {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn names() {
        assert_eq!(Outcome::Ok.name(), "ok");
        assert_eq!(Outcome::Http(503).name(), "HTTP-503");
        assert_eq!(Outcome::Named("UNAVAILABLE").name(), "UNAVAILABLE");
        assert_eq!(Outcome::WrongValue.name(), "wrong-value");
    }

    #[test]
    fn transport_errors_are_classified_by_their_io_cause() {
        let refused = Wrapper(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(
            Outcome::from_transport(&refused),
            Outcome::ConnectionRefused
        );
        let reset = Wrapper(io::Error::from(io::ErrorKind::ConnectionReset));
        assert_eq!(Outcome::from_transport(&reset), Outcome::ConnectionReset);
        let other = EngineError("h2 protocol error".into());
        assert_eq!(Outcome::from_transport(&other), Outcome::ConnectionError);
        assert_eq!(chain(&refused), "transport error: connection refused");
    }
}
