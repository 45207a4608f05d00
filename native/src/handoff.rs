//! `Handoff`: how a native front's threads hand events to Python's event loop in batches.
//!
//! Events go into a queue behind a mutex. A byte is written to a socket pair only when the queue
//! turns non-empty, so Python's loop (watching the read end with `add_reader`) wakes once for as
//! many events as arrive before it gets to run, and takes them all in one call. Shared by the
//! gRPC front (`grpc_front.rs`) and the remoting front (`remoting_front.rs`).

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyList;

struct Queue<E> {
    events: Vec<E>,
    /// a wake-up byte was written and not read yet
    signalled: bool,
}

pub struct Handoff<E> {
    queue: Mutex<Queue<E>>,
    wake_write: UnixStream,
    wake_read: UnixStream,
}

impl<E> Handoff<E> {
    pub fn new() -> io::Result<Self> {
        let (wake_read, wake_write) = UnixStream::pair()?;
        wake_read.set_nonblocking(true)?;
        wake_write.set_nonblocking(true)?;
        Ok(Handoff {
            queue: Mutex::new(Queue {
                events: Vec::new(),
                signalled: false,
            }),
            wake_write,
            wake_read,
        })
    }

    /// Queues `event`; wakes Python if the queue was empty.
    pub fn push(&self, event: E) {
        self.push_all(std::iter::once(event));
    }

    /// Queues `events` under one lock (what one read of a socket produced); wakes Python if the
    /// queue was empty.
    pub fn push_all(&self, events: impl IntoIterator<Item = E>) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let before = queue.events.len();
        queue.events.extend(events);
        if queue.events.len() > before && !queue.signalled {
            queue.signalled = true;
            // a full socket buffer means Python has bytes to read already: nothing is lost
            let _ = (&self.wake_write).write(&[1]);
        }
    }

    /// Every queued event, oldest first; the wake-up bytes are read so the descriptor is quiet again.
    pub fn take(&self) -> Vec<E> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut sink = [0u8; 64];
        while matches!((&self.wake_read).read(&mut sink), Ok(n) if n > 0) {}
        queue.signalled = false;
        std::mem::take(&mut queue.events)
    }

    /// Every queued event as Python takes them: a list, each event made a tuple by `to_py` (the
    /// tuples are each front's own).
    pub fn take_list<'py>(
        &self,
        py: Python<'py>,
        mut to_py: impl FnMut(E) -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for event in self.take() {
            list.append(to_py(event)?)?;
        }
        Ok(list)
    }

    /// The descriptor Python watches: readable while events wait.
    pub fn fileno(&self) -> i32 {
        self.wake_read.as_raw_fd()
    }
}
