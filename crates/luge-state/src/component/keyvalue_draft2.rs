//! `wasi:keyvalue@0.2.0-draft2` (store, atomics with compare-and-swap,
//! batch), the draft `spin-sdk` 7 and Spin 4 import, bound to
//! [`luge_core::keyvalue`] like the 0.2.0-draft in [`super::keyvalue`]
//! (same buckets, grants, bounds and open-bucket count); this file adapts
//! only what draft2 changed: signed counters, the `cas` resource, and
//! batches that answer every key. The WIT is `spin-sdk` 7.0.0's
//! (Luge's WIT root wit/, deps/keyvalue-draft2; Apache-2.0 WITH LLVM-exception).

use luge_core::keyvalue::{self as kv, KvError};
use wasmtime::component::Resource;

use super::{Error, HasKeyValue, KeyValueView};

luge_binding::bindings!("luge:worlds/host-keyvalue-draft2",
    imports: { default: trappable },
    with: {
        "wasi:keyvalue/store@0.2.0-draft2.bucket": luge_core::keyvalue::Bucket,
        "wasi:keyvalue/atomics@0.2.0-draft2.cas": luge_core::keyvalue::Cas,
    },
    trappable_error_type: {
        "wasi:keyvalue/store@0.2.0-draft2.error" => crate::component::Error,
    },
);

use generated::wasi::keyvalue0_2_0_draft2::{atomics, batch, store};

fn store_error(error: KvError) -> store::Error {
    match error {
        KvError::NoSuchStore => store::Error::NoSuchStore,
        KvError::AccessDenied => store::Error::AccessDenied,
        KvError::Other(text) => store::Error::Other(text),
    }
}

impl store::Host for KeyValueView<'_> {
    fn open(&mut self, identifier: String) -> Result<Resource<kv::Bucket>, Error> {
        self.open_bucket(&identifier)
    }

    fn convert_error(&mut self, error: Error) -> wasmtime::Result<store::Error> {
        Ok(store_error(error.0))
    }
}

impl store::HostBucket for KeyValueView<'_> {
    super::draft_operations!(bucket);

    fn list_keys(
        &mut self,
        bucket: Resource<kv::Bucket>,
        cursor: Option<String>,
    ) -> Result<store::KeyResponse, Error> {
        // The cursor is the number a previous page answered, as text.
        let cursor = match cursor {
            Some(cursor) => Some(cursor.parse::<u64>().map_err(|_| {
                Error(kv::KvError::Other(format!(
                    "not a cursor of this store: {cursor:?}"
                )))
            })?),
            None => None,
        };
        let bucket = self.table.get(&bucket)?;
        let (keys, cursor) = bucket.keys(self.state()?, cursor)?;
        Ok(store::KeyResponse {
            keys,
            cursor: cursor.map(|c| c.to_string()),
        })
    }
}

impl atomics::Host for KeyValueView<'_> {
    fn increment(
        &mut self,
        bucket: Resource<kv::Bucket>,
        key: String,
        delta: i64,
    ) -> Result<i64, Error> {
        self.with(&bucket, |bucket, state| bucket.add(state, &key, delta))
    }

    fn swap(
        &mut self,
        cas: Resource<kv::Cas>,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), atomics::CasError>> {
        let cas = self.table.delete(cas)?;
        *self.open = self.open.saturating_sub(1);
        let Ok(state) = self.state() else {
            return Ok(Err(atomics::CasError::StoreError(store::Error::Other(
                "this host keeps no shared state".to_owned(),
            ))));
        };
        Ok(match cas.swap(state, &value) {
            Ok(()) => Ok(()),
            Err(kv::CasError::Store(e)) => Err(atomics::CasError::StoreError(store_error(e))),
            // The key read again, as a new handle for the retry.
            Err(kv::CasError::Changed(again)) => {
                *self.open += 1;
                Err(atomics::CasError::CasFailed(self.table.push(again)?))
            }
        })
    }
}

impl atomics::HostCas for KeyValueView<'_> {
    fn new(
        &mut self,
        bucket: Resource<kv::Bucket>,
        key: String,
    ) -> Result<Resource<kv::Cas>, Error> {
        // A read held by the host: counted with open buckets.
        kv::check_open(*self.open)?;
        let bucket = self.table.get(&bucket)?;
        let cas = bucket.cas(self.state()?, &key)?;
        let cas = self.table.push(cas)?;
        *self.open += 1;
        Ok(cas)
    }

    fn current(&mut self, cas: Resource<kv::Cas>) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.table.get(&cas)?.current().map(<[u8]>::to_vec))
    }

    fn drop(&mut self, cas: Resource<kv::Cas>) -> wasmtime::Result<()> {
        self.table.delete(cas)?;
        *self.open = self.open.saturating_sub(1);
        Ok(())
    }
}

impl batch::Host for KeyValueView<'_> {
    fn get_many(
        &mut self,
        bucket: Resource<kv::Bucket>,
        keys: Vec<String>,
    ) -> Result<Vec<kv::Entry>, Error> {
        Ok(self.table.get(&bucket)?.get_many(self.state()?, keys)?)
    }

    super::draft_operations!(batch);
}

luge_binding::add_to_linker! {
    /// Adds `wasi:keyvalue/{store, atomics, batch}@0.2.0-draft2` to `linker`.
    KeyValueView as HasKeyValue: store, atomics, batch
}
