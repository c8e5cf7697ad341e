//! The executor's end-to-end tests, as one test binary: each module is one
//! area (the files were separate binaries, each linking the same
//! dependencies again). Every test starts a real `luge` on 127.0.0.1 and
//! drives it over HTTP with real modules built from `actions/`.
//!
//! `scheduling` stays a binary of its own: its timing tests run beside
//! each other only, and only on Wasmtime (the one engine that preempts).

#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

mod adversarial;
mod bad_input;
mod calls;
mod capabilities;
mod components;
mod databases;
mod disk_full;
mod engines;
mod fairness;
mod invoker;
mod isolation;
mod limits;
mod metrics;
mod openwhisk_runner;
mod outbound;
mod outbound_mysql;
mod outbound_pg;
mod outbound_redis;
mod run;
mod serve_containers;
mod snapshots;
mod spin;
mod spin_world;
mod sqlite;
mod standalone;
mod state;
mod telemetry;
mod triggers;
