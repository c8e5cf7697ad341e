//! `fermyon:spin/key-value@2.0.0`, as spin-sdk 2 and 3 (and wit-bindgen
//! against Spin 2's WIT) import it: the same buckets, grants and bounds as
//! `spin:key-value@3.0.0` ([`super::spin`]). Synchronous for the guest.
//! The WIT is `spin-sdk` 3.1.1's (Luge's WIT root wit/,
//! deps/fermyon-spin2; Apache-2.0 WITH LLVM-exception).

use luge_core::keyvalue::{self as kv, KvError};
use wasmtime::component::Resource;

use super::{HasKeyValue, KeyValueView};

luge_binding::bindings!("luge:worlds/host-spin2-key-value",
    imports: { default: async | trappable },
    with: {
        "fermyon:spin/key-value@2.0.0.store": luge_core::keyvalue::Bucket,
    },
);

use generated::fermyon::spin2_0_0::key_value;

fn kv_error(error: KvError) -> key_value::Error {
    match error {
        KvError::NoSuchStore => key_value::Error::NoSuchStore,
        KvError::AccessDenied => key_value::Error::AccessDenied,
        KvError::Other(text) => key_value::Error::Other(text),
    }
}

impl key_value::Host for KeyValueView<'_> {}

impl key_value::HostStore for KeyValueView<'_> {
    async fn open(
        &mut self,
        label: String,
    ) -> wasmtime::Result<Result<Resource<kv::Bucket>, key_value::Error>> {
        Ok(self.open_store(&label).map_err(kv_error))
    }

    async fn get(
        &mut self,
        store: Resource<kv::Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, key_value::Error>> {
        Ok(self
            .on_bucket(&store, |bucket, state| bucket.get(state, &key))?
            .map_err(kv_error))
    }

    async fn set(
        &mut self,
        store: Resource<kv::Bucket>,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), key_value::Error>> {
        Ok(self
            .on_bucket(&store, |bucket, state| bucket.set(state, &key, &value))?
            .map_err(kv_error))
    }

    async fn delete(
        &mut self,
        store: Resource<kv::Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<(), key_value::Error>> {
        Ok(self
            .on_bucket(&store, |bucket, state| bucket.delete(state, &key))?
            .map_err(kv_error))
    }

    async fn exists(
        &mut self,
        store: Resource<kv::Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<bool, key_value::Error>> {
        Ok(self
            .on_bucket(&store, |bucket, state| bucket.exists(state, &key))?
            .map_err(kv_error))
    }

    async fn get_keys(
        &mut self,
        store: Resource<kv::Bucket>,
    ) -> wasmtime::Result<Result<Vec<String>, key_value::Error>> {
        // Every key (at most kv::MAX_LISTED), or why the listing ended.
        Ok(self
            .on_bucket(&store, |bucket, state| Ok(bucket.all_keys(state)))?
            .and_then(|(keys, ended)| ended.map(|()| keys))
            .map_err(kv_error))
    }

    async fn drop(&mut self, store: Resource<kv::Bucket>) -> wasmtime::Result<()> {
        self.close_bucket(store)
    }
}

luge_binding::add_to_linker! {
    /// Adds `fermyon:spin/key-value@2.0.0` to `linker`.
    KeyValueView as HasKeyValue: key_value
}
