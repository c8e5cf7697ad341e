//! This crate's Wasmtime component bindings (the `component` feature):
//! the WIT interface of its capability that guests import, adapted to
//! this crate on the view every binding shares (`luge-binding`), and
//! linked by `luge-wasmtime` (its `SLICES`). The WIT each serves is named
//! in its module.

pub mod consumer;
