//! `spin:key-value@3.0.0`, as Spin 4 and `spin-sdk` 7 import it, over
//! Luge's state tiers (the same buckets, grants and bounds as
//! `wasi:keyvalue`, written once in [`luge_core::keyvalue`]). Its functions
//! are WASI 0.3-style `async` functions; they complete at once (the tiers
//! answer synchronously, as every state call does). The WIT is `spin-sdk`
//! 7.0.0's (Luge's WIT root wit/, deps/spin-key-value; Apache-2.0 WITH
//! LLVM-exception).

use luge_core::keyvalue::{self as kv, KvError};
use luge_core::state::State;
use wasmtime::component::{Accessor, Resource};

use super::{HasKeyValue, KeyValueView};

luge_binding::bindings!("luge:worlds/host-spin-key-value",
    imports: { default: trappable },
    with: {
        "spin:key-value/key-value.store": luge_core::keyvalue::Bucket,
    },
);

use generated::spin::key_value::key_value;

fn kv_error(error: KvError) -> key_value::Error {
    match error {
        KvError::NoSuchStore => key_value::Error::NoSuchStore,
        KvError::AccessDenied => key_value::Error::AccessDenied,
        KvError::Other(text) => key_value::Error::Other(text),
    }
}

/// Runs `op` on the open bucket `store` with the invocation's state.
fn with_bucket<T, R>(
    accessor: &Accessor<T, HasKeyValue>,
    store: &Resource<kv::Bucket>,
    op: impl FnOnce(&kv::Bucket, &dyn State) -> Result<R, KvError>,
) -> wasmtime::Result<Result<R, key_value::Error>> {
    accessor.with(|mut access| Ok(access.get().on_bucket(store, op)?.map_err(kv_error)))
}

impl key_value::Host for KeyValueView<'_> {}

impl key_value::HostStore for KeyValueView<'_> {
    fn drop(&mut self, store: Resource<kv::Bucket>) -> wasmtime::Result<()> {
        self.close_bucket(store)
    }
}

impl<T> key_value::HostStoreWithStore<T> for HasKeyValue {
    async fn open(
        accessor: &Accessor<T, Self>,
        label: String,
    ) -> wasmtime::Result<Result<Resource<kv::Bucket>, key_value::Error>> {
        accessor.with(|mut access| {
            let mut view = access.get();
            Ok(view.open_store(&label).map_err(kv_error))
        })
    }

    async fn get(
        accessor: &Accessor<T, Self>,
        store: Resource<kv::Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, key_value::Error>> {
        with_bucket(accessor, &store, |bucket, state| bucket.get(state, &key))
    }

    async fn set(
        accessor: &Accessor<T, Self>,
        store: Resource<kv::Bucket>,
        key: String,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), key_value::Error>> {
        with_bucket(accessor, &store, |bucket, state| {
            bucket.set(state, &key, &value)
        })
    }

    async fn delete(
        accessor: &Accessor<T, Self>,
        store: Resource<kv::Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<(), key_value::Error>> {
        with_bucket(accessor, &store, |bucket, state| bucket.delete(state, &key))
    }

    async fn exists(
        accessor: &Accessor<T, Self>,
        store: Resource<kv::Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<bool, key_value::Error>> {
        with_bucket(accessor, &store, |bucket, state| bucket.exists(state, &key))
    }

    async fn get_keys(
        accessor: &Accessor<T, Self>,
        store: Resource<kv::Bucket>,
    ) -> wasmtime::Result<(
        wasmtime::component::StreamReader<String>,
        wasmtime::component::FutureReader<Result<(), key_value::Error>>,
    )> {
        // Every key (at most kv::MAX_LISTED), then how the listing ended.
        let (keys, ended) =
            match with_bucket(accessor, &store, |bucket, state| Ok(bucket.all_keys(state)))? {
                Ok((keys, ended)) => (keys, ended.map_err(kv_error)),
                Err(error) => (Vec::new(), Err(error)),
            };
        accessor.with(|mut access| {
            let keys = wasmtime::component::StreamReader::new(&mut access, keys)?;
            let result = wasmtime::component::FutureReader::new(
                &mut access,
                std::future::ready(Ok::<_, wasmtime::Error>(ended)),
            )?;
            Ok((keys, result))
        })
    }
}

luge_binding::add_to_linker! {
    /// Adds `spin:key-value@3.0.0` to `linker`.
    KeyValueView as HasKeyValue: key_value
}
