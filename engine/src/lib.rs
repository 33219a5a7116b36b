//! dbtester's native load engine, as the Python module `_engine`: this file is
//! only the boundary (plan in, counters and records out); the engine itself
//! runs on its own thread and never touches Python.

mod driver;
mod outcome;
mod plan;
mod protocols;
mod records;
mod transport;
mod workload;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use numpy::PyArray1;
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString, PyTuple};

use crate::driver::StartError;
use crate::driver::check::Operation as CheckedOperation;
use crate::driver::engine::{Engine, Taken};
use crate::driver::informer::Informed;
use crate::plan::Value;
use crate::records::Records;
use crate::workload::watch::Watched;

// h2 and hyper make many small allocations per request; with mimalloc instead
// of glibc's malloc an etcd request takes 5-8% fewer instructions (callgrind,
// benchmarks/engine_instructions.py; about 8% less CPU when it used tonic).
// It serves only this library's own (Rust) allocations.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often wait() looks for Ctrl-C while it blocks.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// A running load; see `start`.
#[pyclass(frozen, module = "dbtester._engine")]
struct Load {
    engine: Engine,
    /// The result, built once: the records move into numpy the first time.
    result: Mutex<Option<Py<PyDict>>>,
}

#[pymethods]
impl Load {
    /// (requests done, errors, current step index).
    fn progress(&self) -> (u64, u64, u64) {
        self.engine.progress()
    }

    /// When the first request was due, every connection open (Unix ns;
    /// None before): the load's own start, after its connecting.
    fn began_unix_ns(&self) -> Option<u64> {
        self.engine.began()
    }

    /// Sends nothing new; requests in flight get 0.5 s, then are recorded
    /// as "cancelled".
    fn stop(&self) {
        self.engine.stop();
    }

    /// Blocks up to `timeout_s` seconds without holding the GIL; True once
    /// finished. A negative timeout polls; inf waits until done. Ctrl-C
    /// interrupts it.
    fn wait(&self, py: Python<'_>, timeout_s: f64) -> PyResult<bool> {
        if timeout_s.is_nan() {
            return Err(PyValueError::new_err("timeout_s must be a number, got nan"));
        }
        let deadline = Duration::try_from_secs_f64(timeout_s.max(0.0))
            .ok()
            .and_then(|t| Instant::now().checked_add(t));
        loop {
            let slice = match deadline {
                Some(deadline) => deadline
                    .saturating_duration_since(Instant::now())
                    .min(SIGNAL_CHECK),
                None => SIGNAL_CHECK,
            };
            if py.detach(|| self.engine.wait(Some(slice))) {
                return Ok(true);
            }
            py.check_signals()?;
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }

    /// The records, once finished: a dict of numpy arrays (due_ns,
    /// latency_ns, service_ns, code, step, op, queued) plus codes and stopped. Raises
    /// RuntimeError if the engine failed or is still running.
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        // Building the dict can run Python code (a GC pass) that lets another
        // thread in; lock_py_attached waits for the lock without the GIL.
        let mut cached = self
            .result
            .lock_py_attached(py)
            .unwrap_or_else(|e| e.into_inner());
        if let Some(dict) = cached.as_ref() {
            return Ok(dict.clone_ref(py));
        }
        match self.engine.take() {
            Taken::Running => Err(PyRuntimeError::new_err(
                "the load is still running: wait() until it returns True",
            )),
            Taken::Failed(error) => Err(PyRuntimeError::new_err(error.0)),
            Taken::Gone => Err(PyRuntimeError::new_err("the result was already taken")),
            Taken::Finished(finished) => {
                let dict = records_dict(py, finished.records, finished.stopped)?;
                if let Some(watched) = finished.watch {
                    dict.bind(py).set_item("watch", watch_dict(py, *watched)?)?;
                }
                if let Some(operations) = finished.check {
                    dict.bind(py)
                        .set_item("check", check_dict(py, &operations)?)?;
                }
                let counters = PyDict::new(py);
                for (name, count) in &finished.counters {
                    counters.set_item(name, count)?;
                }
                dict.bind(py).set_item("counters", counters)?;
                let compactions: Vec<(i64, i64, i64)> = finished
                    .compactions
                    .iter()
                    .map(|&[started, ended, revision]| (started, ended, revision))
                    .collect();
                dict.bind(py).set_item("compactions", compactions)?;
                let expirations: Vec<(i64, i64)> = finished
                    .expirations
                    .iter()
                    .map(|&[second, count]| (second, count))
                    .collect();
                dict.bind(py).set_item("expirations", expirations)?;
                let holds: Vec<(i64, i64, i64, i64, i64, i64, i64)> = finished
                    .holds
                    .iter()
                    .map(
                        |&[lock, locker, asked, acquired, released, token, crashed]| {
                            (lock, locker, asked, acquired, released, token, crashed)
                        },
                    )
                    .collect();
                dict.bind(py).set_item("holds", holds)?;
                let expired: Vec<(i64, i64, i64, i64)> = finished
                    .expired
                    .iter()
                    .map(|&[expiry, lock, locker, at]| (expiry, lock, locker, at))
                    .collect();
                dict.bind(py).set_item("expired", expired)?;
                let informers = PyList::empty(py);
                for informed in &finished.informed {
                    informers.append(informer_dict(py, informed)?)?;
                }
                dict.bind(py).set_item("informers", informers)?;
                *cached = Some(dict.clone_ref(py));
                Ok(dict)
            }
        }
    }

    fn __repr__(&self) -> String {
        let (done, errors, step) = self.engine.progress();
        format!("<Load done={done} errors={errors} step={step}>")
    }
}

/// Hands each column to numpy as it is (no copy): numpy owns the Vec's memory.
fn records_dict(py: Python<'_>, records: Records, stopped: &str) -> PyResult<Py<PyDict>> {
    let Records {
        due_ns,
        latency_ns,
        service_ns,
        code,
        step,
        op,
        queued,
        codes,
    } = records;
    let dict = PyDict::new(py);
    dict.set_item("due_ns", PyArray1::from_vec(py, due_ns))?;
    dict.set_item("latency_ns", PyArray1::from_vec(py, latency_ns))?;
    dict.set_item("service_ns", PyArray1::from_vec(py, service_ns))?;
    dict.set_item("code", PyArray1::from_vec(py, code))?;
    dict.set_item("step", PyArray1::from_vec(py, step))?;
    dict.set_item("op", PyArray1::from_vec(py, op))?;
    dict.set_item("queued", PyArray1::from_vec(py, queued))?;
    dict.set_item("codes", PyList::new(py, codes.names())?)?;
    dict.set_item("stopped", stopped)?;
    Ok(dict.unbind())
}

/// The checked clients' operations as columns: client, key, write (bool as
/// u8), ended (0 ok, 2 unknown), value, invoked_ns, completed_ns, member
/// (the plan's endpoint index; u16::MAX: unknown).
fn check_dict(py: Python<'_>, operations: &[CheckedOperation]) -> PyResult<Py<PyDict>> {
    fn column<T>(operations: &[CheckedOperation], f: impl Fn(&CheckedOperation) -> T) -> Vec<T> {
        operations.iter().map(f).collect()
    }
    let dict = PyDict::new(py);
    let ops = operations;
    dict.set_item("client", PyArray1::from_vec(py, column(ops, |o| o.client)))?;
    dict.set_item("key", PyArray1::from_vec(py, column(ops, |o| o.key)))?;
    dict.set_item(
        "write",
        PyArray1::from_vec(py, column(ops, |o| u8::from(o.write))),
    )?;
    dict.set_item(
        "ended",
        PyArray1::from_vec(py, column(ops, |o| o.ended as u8)),
    )?;
    dict.set_item("value", PyArray1::from_vec(py, column(ops, |o| o.value)))?;
    dict.set_item(
        "invoked_ns",
        PyArray1::from_vec(py, column(ops, |o| o.invoked_ns)),
    )?;
    dict.set_item(
        "completed_ns",
        PyArray1::from_vec(py, column(ops, |o| o.completed_ns)),
    )?;
    dict.set_item("member", PyArray1::from_vec(py, column(ops, |o| o.member)))?;
    Ok(dict.unbind())
}

/// What one informer did and saw; its lags (µs) as an array.
fn informer_dict(py: Python<'_>, informed: &Informed) -> PyResult<Py<PyDict>> {
    let dict = PyDict::new(py);
    let synced_us = u64::try_from(informed.synced.as_micros()).unwrap_or(u64::MAX);
    dict.set_item("synced_us", synced_us)?;
    dict.set_item("relists", informed.relists)?;
    dict.set_item("resumes", informed.resumes)?;
    dict.set_item("events", informed.events)?;
    dict.set_item("lags_us", PyArray1::from_slice(py, &informed.lags_us))?;
    dict.set_item("converged", informed.converged)?;
    dict.set_item("problems", &informed.problems)?;
    dict.set_item("problem_count", informed.problem_count)?;
    Ok(dict.unbind())
}

/// What the watchers saw: every (event, watcher) pair as four columns
/// (watcher, key offset, latency_us, arrival_ms), each watcher's counts, and
/// which keys each saw (`seen`: `words` u64 bitset words per watcher).
fn watch_dict(py: Python<'_>, watched: Watched) -> PyResult<Py<PyDict>> {
    let Watched {
        logs,
        acked,
        sent_ms,
        origin_unix_ns,
    } = watched;
    let total: usize = logs.iter().map(|l| l.samples.len()).sum();
    let mut watcher = Vec::with_capacity(total);
    let mut key = Vec::with_capacity(total);
    let mut latency_us = Vec::with_capacity(total);
    let mut arrival_ms = Vec::with_capacity(total);
    let words = logs.first().map_or(0, |l| l.seen.len());
    let mut seen = Vec::with_capacity(words * logs.len());
    let (mut duplicates, mut out_of_order) = (Vec::new(), Vec::new());
    let (mut foreign, mut coalesced, mut split) = (Vec::new(), Vec::new(), Vec::new());
    let (mut duplicate_watcher, mut duplicate_ms) = (Vec::new(), Vec::new());
    for (index, log) in logs.into_iter().enumerate() {
        let index = u16::try_from(index).unwrap_or(u16::MAX);
        for sample in &log.samples {
            watcher.push(index);
            key.push(sample.key);
            latency_us.push(sample.latency_us);
            arrival_ms.push(sample.arrival_ms);
        }
        duplicate_watcher.extend(log.duplicate_ms.iter().map(|_| index));
        duplicate_ms.extend_from_slice(&log.duplicate_ms);
        seen.extend_from_slice(&log.seen);
        duplicates.push(log.duplicates);
        out_of_order.push(log.out_of_order);
        foreign.push(log.foreign);
        coalesced.push(log.coalesced);
        split.push(log.split);
    }
    let dict = PyDict::new(py);
    dict.set_item("watcher", PyArray1::from_vec(py, watcher))?;
    dict.set_item("key", PyArray1::from_vec(py, key))?;
    dict.set_item("latency_us", PyArray1::from_vec(py, latency_us))?;
    dict.set_item("arrival_ms", PyArray1::from_vec(py, arrival_ms))?;
    dict.set_item("seen", PyArray1::from_vec(py, seen))?;
    dict.set_item("words", words)?;
    dict.set_item("duplicates", PyArray1::from_vec(py, duplicates))?;
    dict.set_item("out_of_order", PyArray1::from_vec(py, out_of_order))?;
    dict.set_item("foreign", PyArray1::from_vec(py, foreign))?;
    dict.set_item("coalesced", PyArray1::from_vec(py, coalesced))?;
    dict.set_item("split", PyArray1::from_vec(py, split))?;
    dict.set_item("origin_unix_ns", origin_unix_ns)?;
    dict.set_item("acked", PyArray1::from_vec(py, acked))?;
    dict.set_item("sent_ms", PyArray1::from_vec(py, sent_ms))?;
    dict.set_item(
        "duplicate_watcher",
        PyArray1::from_vec(py, duplicate_watcher),
    )?;
    dict.set_item("duplicate_ms", PyArray1::from_vec(py, duplicate_ms))?;
    Ok(dict.unbind())
}

/// Validates `plan`, starts the engine on its own thread and returns at once.
#[pyfunction]
fn start(plan: &Bound<'_, PyAny>) -> PyResult<Load> {
    let value = to_value(plan, "plan", 0)?;
    let plan = plan::parse(&value).map_err(|e| PyValueError::new_err(e.0))?;
    let engine = driver::start(plan).map_err(|e| match e {
        StartError::Invalid(error) => PyValueError::new_err(error.0),
        StartError::Memory(message) => PyMemoryError::new_err(message),
        StartError::Engine(error) => PyRuntimeError::new_err(error.0),
    })?;
    Ok(Load {
        engine,
        result: Mutex::new(None),
    })
}

/// A plan is three levels deep (plan, steps, a step); a deeper value is not a
/// plan, and a list that holds itself must not recurse until the stack ends.
const MAX_DEPTH: usize = 8;

/// Python values to the plan's neutral tree. bool is checked before int
/// (bool is an int in Python), and ints go through __index__ so numpy
/// integers work too.
fn to_value(obj: &Bound<'_, PyAny>, path: &str, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "{path} is nested more than {MAX_DEPTH} levels deep: not part of a plan"
        )));
    }
    if obj.is_none() {
        return Ok(Value::None);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::Float(f.value()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::Str(s.to_str()?.to_owned()));
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        let mut entries = Vec::with_capacity(dict.len());
        for (key, value) in dict.iter() {
            let Ok(name) = key.cast::<PyString>() else {
                return Err(PyValueError::new_err(format!(
                    "{path} has a key that is not a string: {}",
                    key.repr()?
                )));
            };
            let name = name.to_str()?.to_owned();
            let value = to_value(&value, &format!("{path}[{name:?}]"), depth + 1)?;
            entries.push((name, value));
        }
        return Ok(Value::Dict(entries));
    }
    if obj.cast::<PyList>().is_ok() || obj.cast::<PyTuple>().is_ok() {
        let mut items = Vec::new();
        for (i, item) in obj.try_iter()?.enumerate() {
            items.push(to_value(&item?, &format!("{path}[{i}]"), depth + 1)?);
        }
        return Ok(Value::List(items));
    }
    if obj.hasattr("__index__")? {
        return Ok(match obj.extract::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Other(format!("{} (out of range)", obj.repr()?)),
        });
    }
    Ok(Value::Other(format!(
        "a {}",
        obj.get_type().name()?.to_str()?
    )))
}

#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Load>()?;
    m.add_function(wrap_pyfunction!(start, m)?)?;
    // The records' `op` column indexes this: each operation's name by code.
    m.add(
        "OPERATIONS",
        PyTuple::new(m.py(), workload::operation_names())?,
    )?;
    Ok(())
}
