//! The small interface the scheduler drives each database through.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::outcome::{EngineError, Outcome};
use crate::plan::{Plan, Step};

/// One step's connections to a database. Generic (not boxed) so each
/// protocol's request path compiles down to direct calls.
pub trait Protocol: Sized + Send + Sync + 'static {
    /// Opens `step.connections` connections, all of them before returning
    /// (the step's start barrier); failing to is an engine failure.
    fn open(plan: &Plan, step: &Step) -> impl Future<Output = Result<Self, EngineError>> + Send;

    /// Sends request `key` over connection `conn` and checks the reply.
    /// `sent` holds when the call began; a protocol that first waits for its
    /// connection moves it to when the request actually went out.
    fn request(
        &self,
        conn: usize,
        key: &[u8],
        sent: &mut Instant,
    ) -> impl Future<Output = Outcome> + Send;

    /// Closes every connection.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// `what` must finish within `limit`, or the engine fails saying so.
pub async fn within<T>(
    limit: Duration,
    what: impl FnOnce() -> String,
    work: impl Future<Output = Result<T, EngineError>>,
) -> Result<T, EngineError> {
    match tokio::time::timeout(limit, work).await {
        Ok(result) => result,
        Err(_) => Err(EngineError(format!(
            "{}: no answer within {:.3} s",
            what(),
            limit.as_secs_f64()
        ))),
    }
}
