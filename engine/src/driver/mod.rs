//! The driver: runs a load on its own thread and runtime.

pub mod check;
pub mod engine;
pub mod pacing;
pub mod timer;
