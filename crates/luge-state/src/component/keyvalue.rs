//! `wasi:keyvalue` (0.2.0-draft: store, atomics, batch) for components,
//! bound to [`luge_core::keyvalue`]: this file only adapts the generated
//! bindings (resources in the store's table, errors) to it. The WIT is
//! wasmtime-wasi-keyvalue 48.0.8's (Luge's WIT root wit/, deps/keyvalue-draft; Apache-2.0 WITH
//! LLVM-exception).

use luge_core::keyvalue::{self as kv, KvError};
use wasmtime::component::Resource;

use super::{Error, HasKeyValue, KeyValueView};

luge_binding::bindings!("luge:worlds/host-keyvalue-draft",
    imports: { default: trappable },
    with: {
        "wasi:keyvalue/store@0.2.0-draft.bucket": luge_core::keyvalue::Bucket,
    },
    trappable_error_type: {
        "wasi:keyvalue/store@0.2.0-draft.error" => crate::component::Error,
    },
);

use generated::wasi::keyvalue0_2_0_draft as keyvalue;

impl keyvalue::store::Host for KeyValueView<'_> {
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

impl keyvalue::store::HostBucket for KeyValueView<'_> {
    super::draft_operations!(bucket);

    fn list_keys(
        &mut self,
        bucket: Resource<kv::Bucket>,
        cursor: Option<u64>,
    ) -> Result<keyvalue::store::KeyResponse, Error> {
        let bucket = self.table.get(&bucket)?;
        let (keys, cursor) = bucket.keys(self.state()?, cursor)?;
        Ok(keyvalue::store::KeyResponse { keys, cursor })
    }
}

impl keyvalue::atomics::Host for KeyValueView<'_> {
    fn increment(
        &mut self,
        bucket: Resource<kv::Bucket>,
        key: String,
        delta: u64,
    ) -> Result<u64, Error> {
        self.with(&bucket, |bucket, state| {
            bucket.increment(state, &key, delta)
        })
    }
}

impl keyvalue::batch::Host for KeyValueView<'_> {
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

    super::draft_operations!(batch);
}

luge_binding::add_to_linker! {
    /// Adds `wasi:keyvalue/{store, atomics, batch}` to `linker`.
    KeyValueView as HasKeyValue: keyvalue::store, keyvalue::atomics, keyvalue::batch
}
