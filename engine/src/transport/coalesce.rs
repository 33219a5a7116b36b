//! An HTTP/2 connection's socket with its writes gathered: one write syscall
//! per turn of the task driving the connection, rather than one per request.
//!
//! h2 hands its buffer to the socket whenever a DATA frame of more than 256
//! bytes is queued (an etcd request with a 256-byte key is one), and a task
//! woken by another runs right after it (tokio's LIFO slot): every request
//! cost a write syscall, and on loopback a write also runs the receiver's
//! side of TCP. Here h2 writes into a buffer that the driving task sends after
//! each turn of the connection, and when woken that task first lets the tasks
//! already runnable (clients whose replies just came in) queue their requests,
//! so that one write carries all of them.
//!
//! The socket is a TCP stream's halves, or a TLS stream's: the coalescing
//! matters as much there, since each write is also a TLS record.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// Past this much unsent, h2's writes wait for the socket (backpressure).
const MAX_UNSENT: usize = 1 << 20;

/// What h2 wrote and the driver has not sent yet, and why sending stopped.
#[derive(Default)]
struct Outbox {
    unsent: BytesMut,
    /// The socket's write error: h2 sees it on its next read or write.
    failed: Option<io::ErrorKind>,
}

type Shared = Arc<Mutex<Outbox>>;

fn lock(outbox: &Shared) -> MutexGuard<'_, Outbox> {
    outbox.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The socket as h2 sees it: reads come from the stream's read half
/// (`R`), writes go to the outbox. Only the driving task touches either,
/// so the lock is never contended.
pub struct Socket<R> {
    read: R,
    outbox: Shared,
}

/// The sending side: the stream's write half (`W`) and the outbox it empties.
pub struct Sink<W> {
    write: W,
    outbox: Shared,
}

/// Splits `tcp` into the socket h2 reads and writes, and the sink that
/// `Driver` sends what was written through.
pub fn split(tcp: TcpStream) -> (Socket<OwnedReadHalf>, Sink<OwnedWriteHalf>) {
    let (read, write) = tcp.into_split();
    halves(read, write)
}

/// `split` for any stream (a TLS one): its halves share it through a lock
/// (tokio::io::split), where a TCP stream's need none.
pub fn split_stream<S: AsyncRead + AsyncWrite>(
    stream: S,
) -> (Socket<ReadHalf<S>>, Sink<WriteHalf<S>>) {
    let (read, write) = tokio::io::split(stream);
    halves(read, write)
}

fn halves<R, W>(read: R, write: W) -> (Socket<R>, Sink<W>) {
    let outbox = Shared::default();
    let socket = Socket {
        read,
        outbox: outbox.clone(),
    };
    (socket, Sink { write, outbox })
}

impl<R: AsyncRead + Unpin> AsyncRead for Socket<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(kind) = lock(&self.outbox).failed {
            return Poll::Ready(Err(kind.into()));
        }
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

impl<R> AsyncWrite for Socket<R> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored_inner(&[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored_inner(bufs)
    }

    /// So h2 hands over a large DATA frame with its header in one call.
    fn is_write_vectored(&self) -> bool {
        true
    }

    /// The driver sends after every turn of the connection: nothing to do.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// The driver sends what is left (a GOAWAY) once the connection is done,
    /// and dropping the write half shuts the socket down.
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl<R> Socket<R> {
    /// Takes everything, unless the socket is failing or far behind: then
    /// h2 waits, and the driver polls it again once it has sent.
    fn poll_write_vectored_inner(&self, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let mut outbox = lock(&self.outbox);
        if let Some(kind) = outbox.failed {
            return Poll::Ready(Err(kind.into()));
        }
        if outbox.unsent.len() >= MAX_UNSENT {
            return Poll::Pending;
        }
        let mut taken = 0;
        for buf in bufs {
            outbox.unsent.extend_from_slice(buf);
            taken += buf.len();
        }
        Poll::Ready(Ok(taken))
    }
}

/// Runs `connection` (h2's connection future over a `Socket`) and sends what
/// it writes; see the module's comment.
pub struct Driver<C: Future, W> {
    connection: C,
    sink: Sink<W>,
    /// This turn's yield to the other runnable tasks is done.
    yielded: bool,
    /// The connection's result, held until what it wrote last (a GOAWAY) is sent.
    finished: Option<C::Output>,
}

impl<C: Future, W> Driver<C, W> {
    pub fn new(connection: C, sink: Sink<W>) -> Self {
        Driver {
            connection,
            sink,
            yielded: false,
            finished: None,
        }
    }
}

impl<C: Future + Unpin, W: AsyncWrite + Unpin> Future for Driver<C, W>
where
    C::Output: Unpin,
{
    type Output = C::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = &mut *self;
        if this.finished.is_none() && !this.yielded {
            // Woken: go to the back of the run queue, behind the clients that
            // are about to queue requests on this connection.
            this.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        this.yielded = false;
        while this.finished.is_none() {
            if let Poll::Ready(output) = Pin::new(&mut this.connection).poll(cx) {
                this.finished = Some(output);
                break;
            }
            let backlog = lock(&this.sink.outbox).unsent.len() >= MAX_UNSENT;
            match this.sink.poll_send(cx) {
                // A failed socket: let h2 see it now.
                Poll::Ready(Err(_)) => continue,
                // All sent, and h2 was waiting for room.
                Poll::Ready(Ok(())) if backlog => continue,
                // Sent, or the socket wakes this task when it takes more.
                _ => return Poll::Pending,
            }
        }
        // Errors are h2's to report, and it has: only the output matters now.
        let _ = ready!(this.sink.poll_send(cx));
        Poll::Ready(this.finished.take().expect("set above"))
    }
}

impl<W: AsyncWrite + Unpin> Sink<W> {
    /// Sends the outbox, then flushes: a TLS stream may keep records back
    /// from its last write until then (a TCP stream's flush does nothing).
    /// A write error is kept for h2 to see.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut outbox = lock(&self.outbox);
        if outbox.failed.is_some() {
            return Poll::Ready(Ok(()));
        }
        while !outbox.unsent.is_empty() {
            match ready!(Pin::new(&mut self.write).poll_write(cx, &outbox.unsent)) {
                Ok(0) => outbox.failed = Some(io::ErrorKind::WriteZero),
                Ok(sent) => {
                    outbox.unsent.advance(sent);
                    continue;
                }
                Err(e) => outbox.failed = Some(e.kind()),
            }
            outbox.unsent.clear();
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if let Err(e) = ready!(Pin::new(&mut self.write).poll_flush(cx)) {
            outbox.failed = Some(e.kind());
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ours = TcpStream::connect(listener.local_addr().unwrap());
        let (ours, theirs) = tokio::join!(ours, listener.accept());
        (ours.unwrap(), theirs.unwrap().0)
    }

    /// A stand-in for h2's connection: writes `data` in pieces, then is done.
    fn writer<R: Send + Unpin + 'static>(
        mut socket: Socket<R>,
        data: Vec<u8>,
    ) -> Pin<Box<dyn Future<Output = io::Result<()>> + Send>> {
        Box::pin(async move {
            for piece in data.chunks(70_000) {
                socket.write_all(piece).await?;
            }
            Ok(())
        })
    }

    #[tokio::test]
    async fn everything_written_arrives_in_order_past_the_unsent_limit() {
        let (ours, mut theirs) = pair().await;
        let (socket, sink) = split(ours);
        let data: Vec<u8> = (0..24 * MAX_UNSENT).map(|i| (i % 251) as u8).collect();
        let driver = tokio::spawn(Driver::new(writer(socket, data.clone()), sink));
        // The peer reads late: the socket (its buffers hold a few MB) fills,
        // and the writer has to wait.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let mut got = Vec::new();
        theirs.read_to_end(&mut got).await.unwrap(); // EOF once the driver is done
        assert!(got == data, "{} of {} bytes", got.len(), data.len());
        driver.await.unwrap().unwrap();
    }

    /// The same through a stream's shared halves (what a TLS stream takes):
    /// a tokio duplex pipe with a small buffer, so writes wait on the reader.
    #[tokio::test]
    async fn a_split_stream_carries_everything_in_order() {
        let (ours, mut theirs) = tokio::io::duplex(64 << 10);
        let (socket, sink) = split_stream(ours);
        let data: Vec<u8> = (0..3 * MAX_UNSENT).map(|i| (i % 251) as u8).collect();
        let driver = tokio::spawn(Driver::new(writer(socket, data.clone()), sink));
        let mut got = vec![0; data.len()];
        theirs.read_exact(&mut got).await.unwrap();
        assert!(got == data);
        driver.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_socket_that_fails_fails_the_writer() {
        let (ours, theirs) = pair().await;
        drop(theirs);
        let (socket, sink) = split(ours);
        let data = vec![0u8; 5 * MAX_UNSENT];
        let error = Driver::new(writer(socket, data), sink).await.unwrap_err();
        assert!(
            matches!(
                error.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            "{error}"
        );
    }
}
