//! This crate's Wasmtime component bindings (the `component` feature): the
//! key-value interfaces guests import, each adapted to
//! [`luge_core::keyvalue`]'s buckets over the invocation's [`State`] (the
//! same buckets, grants, bounds and open-bucket count whichever a function
//! imports), and linked by `luge-wasmtime` (its `SLICES`):
//!
//! - [`keyvalue`]: `wasi:keyvalue@0.2.0-draft` (wasmtime-wasi-keyvalue's);
//! - [`keyvalue_draft2`]: `wasi:keyvalue@0.2.0-draft2` (spin-sdk 7's);
//! - [`spin`]: `spin:key-value@3.0.0` (Spin 4's, a WASI 0.3 `async`
//!   interface);
//! - [`spin2`]: `fermyon:spin/key-value@2.0.0` (spin-sdk 2 and 3's).
//!
//! The WIT each serves is named in its module.

use std::sync::Arc;

use luge_core::keyvalue::{self as kv, KvError};
use luge_core::state::State;
use wasmtime::component::{HasData, Resource, ResourceTable, ResourceTableError};

/// `store`'s bucket operations and `batch`'s writes, which both
/// `wasi:keyvalue` drafts word alike: written once, each draft's
/// `HostBucket` (`bucket`) and `batch::Host` (`batch`) take them.
macro_rules! draft_operations {
    (bucket) => {
        fn get(
            &mut self,
            bucket: Resource<kv::Bucket>,
            key: String,
        ) -> Result<Option<Vec<u8>>, Error> {
            self.with(&bucket, |bucket, state| bucket.get(state, &key))
        }

        fn set(
            &mut self,
            bucket: Resource<kv::Bucket>,
            key: String,
            value: Vec<u8>,
        ) -> Result<(), Error> {
            self.with(&bucket, |bucket, state| bucket.set(state, &key, &value))
        }

        fn delete(&mut self, bucket: Resource<kv::Bucket>, key: String) -> Result<(), Error> {
            self.with(&bucket, |bucket, state| bucket.delete(state, &key))
        }

        fn exists(&mut self, bucket: Resource<kv::Bucket>, key: String) -> Result<bool, Error> {
            self.with(&bucket, |bucket, state| bucket.exists(state, &key))
        }

        fn drop(&mut self, bucket: Resource<kv::Bucket>) -> wasmtime::Result<()> {
            self.close_bucket(bucket)
        }
    };
    (batch) => {
        fn set_many(
            &mut self,
            bucket: Resource<kv::Bucket>,
            key_values: Vec<(String, Vec<u8>)>,
        ) -> Result<(), Error> {
            Ok(self
                .table
                .get(&bucket)?
                .set_many(self.state()?, &key_values)?)
        }

        fn delete_many(
            &mut self,
            bucket: Resource<kv::Bucket>,
            keys: Vec<String>,
        ) -> Result<(), Error> {
            Ok(self.table.get(&bucket)?.delete_many(self.state()?, &keys)?)
        }
    };
}
use draft_operations;

pub mod keyvalue;
pub mod keyvalue_draft2;
pub mod spin;
pub mod spin2;

/// A key-value error on its way to the guest.
pub struct Error(pub KvError);

impl From<KvError> for Error {
    fn from(error: KvError) -> Self {
        Self(error)
    }
}

impl From<ResourceTableError> for Error {
    fn from(error: ResourceTableError) -> Self {
        Self(KvError::Other(error.to_string()))
    }
}

/// The key-value part of a component's host state.
#[derive(Default)]
pub struct KeyValueState {
    /// The invocation's shared state (`None`: the host keeps none).
    pub state: Option<Arc<dyn State>>,
    /// Buckets (and compare-and-swap reads) open now.
    pub open: usize,
}

impl KeyValueState {
    /// The bindings' view: this state, the store's table, the stores the
    /// function reaches on the global tier, and the labels a Spin
    /// component may open.
    pub fn view<'a>(
        &'a mut self,
        table: &'a mut ResourceTable,
        global: &'a [String],
        labels: Option<&'a [String]>,
    ) -> KeyValueView<'a> {
        KeyValueView {
            table,
            state: self.state.as_ref(),
            open: &mut self.open,
            global,
            labels,
        }
    }
}

/// What every key-value binding works on: the store's resource table and
/// the invocation's state (`None`: the host keeps no state; every open
/// fails).
pub struct KeyValueView<'a> {
    table: &'a mut ResourceTable,
    state: Option<&'a Arc<dyn State>>,
    /// Buckets open now (bounded by `kv::MAX_OPEN_BUCKETS`).
    open: &'a mut usize,
    /// The stores the function reaches on the global tier by their plain
    /// label.
    global: &'a [String],
    /// The labels a Spin component may open (its manifest's
    /// `key_value_stores`); `None`: every label.
    labels: Option<&'a [String]>,
}

/// The bindings' host state.
pub struct HasKeyValue;

impl HasData for HasKeyValue {
    type Data<'a> = KeyValueView<'a>;
}

impl KeyValueView<'_> {
    /// The invocation's state; an error if this host keeps none.
    fn state(&self) -> Result<&dyn State, Error> {
        self.state
            .map(|state| &**state)
            .ok_or_else(|| Error(KvError::Other("this host keeps no shared state".to_owned())))
    }

    /// `op` on the open bucket `bucket` with the invocation's state, for
    /// `wasi:keyvalue` (whose errors trap through [`Error`]).
    fn with<R>(
        &self,
        bucket: &Resource<kv::Bucket>,
        op: impl FnOnce(&kv::Bucket, &dyn State) -> Result<R, KvError>,
    ) -> Result<R, Error> {
        let bucket = self.table.get(bucket)?;
        Ok(op(bucket, self.state()?)?)
    }

    /// Opens the bucket `identifier`, counted against the open bound.
    fn open_bucket(&mut self, identifier: &str) -> Result<Resource<kv::Bucket>, Error> {
        self.state()?;
        kv::check_open(*self.open)?;
        let bucket = self.table.push(kv::open(identifier, self.global)?)?;
        *self.open += 1;
        Ok(bucket)
    }

    /// Closes `bucket`.
    fn close_bucket(&mut self, bucket: Resource<kv::Bucket>) -> wasmtime::Result<()> {
        self.table.delete(bucket)?;
        *self.open = self.open.saturating_sub(1);
        Ok(())
    }

    /// Opens the store `label` for Spin's interfaces: access denied where
    /// the function is a Spin component whose manifest does not list it,
    /// as Spin answers (`global:NAME`, Luge's name for the store NAME on
    /// the Redis tier, is listed as NAME or as itself).
    fn open_store(&mut self, label: &str) -> Result<Resource<kv::Bucket>, KvError> {
        let plain = label.strip_prefix("global:").unwrap_or(label);
        if self.labels.is_some_and(|labels| {
            !labels
                .iter()
                .any(|granted| granted == label || granted == plain)
        }) {
            return Err(KvError::AccessDenied);
        }
        self.open_bucket(label).map_err(|e| e.0)
    }

    /// Runs `op` on the open bucket `bucket` with the invocation's state,
    /// for Spin's interfaces (their errors are values, not traps).
    fn on_bucket<R>(
        &mut self,
        bucket: &Resource<kv::Bucket>,
        op: impl FnOnce(&kv::Bucket, &dyn State) -> Result<R, KvError>,
    ) -> wasmtime::Result<Result<R, KvError>> {
        let bucket = self.table.get(bucket)?;
        let Some(state) = self.state else {
            return Ok(Err(KvError::Other(
                "this host keeps no shared state".to_owned(),
            )));
        };
        Ok(op(bucket, &**state))
    }
}
