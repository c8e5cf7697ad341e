//! `wasi:keyvalue` (0.2.0-draft: store, atomics, batch) for components,
//! bound to [`luge_core::keyvalue`]: this file only adapts the generated
//! bindings (resources in the store's table, errors) to it. The WIT is
//! wasmtime-wasi-keyvalue 48.0.8's (Luge's WIT root wit/, deps/keyvalue-draft; Apache-2.0 WITH
//! LLVM-exception).

use std::sync::Arc;

use luge_core::keyvalue::{self as kv, KvError};
use luge_core::state::State;
use wasmtime::component::{HasData, Resource, ResourceTable, ResourceTableError};

mod generated {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "luge:worlds/host-keyvalue-draft",
        imports: { default: trappable },
        with: {
            "wasi:keyvalue/store@0.2.0-draft.bucket": luge_core::keyvalue::Bucket,
        },
        trappable_error_type: {
            "wasi:keyvalue/store@0.2.0-draft.error" => super::Error,
        },
    });
}

use generated::wasi::keyvalue0_2_0_draft as keyvalue;

/// A key-value error on its way to the guest.
pub struct Error(pub(crate) KvError);

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

/// The key-value slice's part of a component's host state
/// (`wasi:keyvalue` and `spin:key-value`).
pub(crate) struct KeyValueState {
    /// The invocation's shared state (`None`: the host keeps none).
    pub(crate) state: Option<Arc<dyn State>>,
    /// Buckets (and compare-and-swap reads) open now.
    pub(crate) open: usize,
}

impl KeyValueState {
    /// The bindings' view: this state, the store's table and the stores
    /// the function reaches on the global tier.
    pub(crate) fn view<'a>(
        &'a mut self,
        table: &'a mut ResourceTable,
        global: &'a [String],
    ) -> WasiKeyValue<'a> {
        WasiKeyValue {
            table,
            state: self.state.as_ref(),
            open: &mut self.open,
            global,
        }
    }
}

/// What the bindings work on: the store's resource table and the
/// invocation's state (`None`: the host keeps no state; every open fails).
pub struct WasiKeyValue<'a> {
    pub(crate) table: &'a mut ResourceTable,
    pub(crate) state: Option<&'a Arc<dyn State>>,
    /// Buckets open now (bounded by `kv::MAX_OPEN_BUCKETS`).
    pub(crate) open: &'a mut usize,
    /// The stores the function reaches on the global tier by their plain
    /// label.
    pub(crate) global: &'a [String],
}

impl WasiKeyValue<'_> {
    /// The invocation's state; an error if this host keeps none.
    pub(crate) fn state(&self) -> Result<&dyn State, Error> {
        self.state
            .map(|state| &**state)
            .ok_or_else(|| Error(KvError::Other("this host keeps no shared state".to_owned())))
    }

    /// Opens the bucket `identifier`, counted against the open bound.
    pub(crate) fn open_bucket(&mut self, identifier: &str) -> Result<Resource<kv::Bucket>, Error> {
        self.state()?;
        kv::check_open(*self.open)?;
        let bucket = self.table.push(kv::open(identifier, self.global)?)?;
        *self.open += 1;
        Ok(bucket)
    }

    /// Closes `bucket`.
    pub(crate) fn close_bucket(&mut self, bucket: Resource<kv::Bucket>) -> wasmtime::Result<()> {
        self.table.delete(bucket)?;
        *self.open = self.open.saturating_sub(1);
        Ok(())
    }
}

impl keyvalue::store::Host for WasiKeyValue<'_> {
    fn open(&mut self, identifier: String) -> Result<Resource<kv::Bucket>, Error> {
        self.open_bucket(&identifier)
    }

    fn convert_error(&mut self, error: Error) -> wasmtime::Result<keyvalue::store::Error> {
        Ok(match error.0 {
            KvError::NoSuchStore => keyvalue::store::Error::NoSuchStore,
            KvError::AccessDenied => keyvalue::store::Error::AccessDenied,
            KvError::Other(text) => keyvalue::store::Error::Other(text),
        })
    }
}

impl keyvalue::store::HostBucket for WasiKeyValue<'_> {
    fn get(&mut self, bucket: Resource<kv::Bucket>, key: String) -> Result<Option<Vec<u8>>, Error> {
        let bucket = self.table.get(&bucket)?;
        Ok(bucket.get(self.state()?, &key)?)
    }

    fn set(
        &mut self,
        bucket: Resource<kv::Bucket>,
        key: String,
        value: Vec<u8>,
    ) -> Result<(), Error> {
        let bucket = self.table.get(&bucket)?;
        Ok(bucket.set(self.state()?, &key, &value)?)
    }

    fn delete(&mut self, bucket: Resource<kv::Bucket>, key: String) -> Result<(), Error> {
        let bucket = self.table.get(&bucket)?;
        Ok(bucket.delete(self.state()?, &key)?)
    }

    fn exists(&mut self, bucket: Resource<kv::Bucket>, key: String) -> Result<bool, Error> {
        let bucket = self.table.get(&bucket)?;
        Ok(bucket.exists(self.state()?, &key)?)
    }

    fn list_keys(
        &mut self,
        bucket: Resource<kv::Bucket>,
        cursor: Option<u64>,
    ) -> Result<keyvalue::store::KeyResponse, Error> {
        let bucket = self.table.get(&bucket)?;
        let (keys, cursor) = bucket.keys(self.state()?, cursor)?;
        Ok(keyvalue::store::KeyResponse { keys, cursor })
    }

    fn drop(&mut self, bucket: Resource<kv::Bucket>) -> wasmtime::Result<()> {
        self.close_bucket(bucket)
    }
}

impl keyvalue::atomics::Host for WasiKeyValue<'_> {
    fn increment(
        &mut self,
        bucket: Resource<kv::Bucket>,
        key: String,
        delta: u64,
    ) -> Result<u64, Error> {
        let bucket = self.table.get(&bucket)?;
        Ok(bucket.increment(self.state()?, &key, delta)?)
    }
}

impl keyvalue::batch::Host for WasiKeyValue<'_> {
    fn get_many(
        &mut self,
        bucket: Resource<kv::Bucket>,
        keys: Vec<String>,
    ) -> Result<Vec<Option<(String, Vec<u8>)>>, Error> {
        let got = self.table.get(&bucket)?.get_many(self.state()?, keys)?;
        // This draft answers only the keys that have values.
        Ok(got
            .into_iter()
            .map(|(key, value)| value.map(|value| (key, value)))
            .collect())
    }

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
}

/// Adds `wasi:keyvalue/{store, atomics, batch}` to `linker`.
pub(crate) fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    view: fn(&mut T) -> WasiKeyValue<'_>,
) -> wasmtime::Result<()> {
    keyvalue::store::add_to_linker::<_, HasWasiKeyValue>(linker, view)?;
    keyvalue::atomics::add_to_linker::<_, HasWasiKeyValue>(linker, view)?;
    keyvalue::batch::add_to_linker::<_, HasWasiKeyValue>(linker, view)?;
    Ok(())
}

pub(crate) struct HasWasiKeyValue;

impl HasData for HasWasiKeyValue {
    type Data<'a> = WasiKeyValue<'a>;
}
