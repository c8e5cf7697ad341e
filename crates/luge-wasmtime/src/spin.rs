//! Spin's own interfaces, as Spin 4 and `spin-sdk` 7 import them:
//! `spin:key-value@3.0.0` over Luge's state tiers (the same buckets,
//! grants and bounds as `wasi:keyvalue`, written once in
//! [`luge_core::keyvalue`]) and `spin:variables@3.0.0` from the route's
//! variables (those `wasi:config/store` serves). Both are WASI 0.3-style
//! `async` functions; they complete at once (the tiers answer
//! synchronously, as every state call does). The WIT is `spin-sdk`
//! 7.0.0's (Luge's WIT root wit/; Apache-2.0 WITH LLVM-exception).

use luge_core::capabilities::check_variable;
use luge_core::keyvalue::{self as kv, KvError};
use luge_core::state::State;
use wasmtime::component::{Accessor, HasData, Resource};

use crate::keyvalue::WasiKeyValue;

mod generated {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "luge:worlds/host-spin",
        imports: { default: trappable },
        with: {
            "spin:key-value/key-value.store": luge_core::keyvalue::Bucket,
        },
    });
}

use generated::spin::key_value::key_value;
use generated::spin::variables::variables;

/// What Spin's interfaces work on: the store's resource table, the
/// invocation's state, its open buckets and its variables.
pub struct SpinView<'a> {
    pub(crate) kv: WasiKeyValue<'a>,
    pub(crate) variables: &'a [(String, String)],
    /// The labels a Spin component may open (its manifest's
    /// `key_value_stores`); `None`: every label.
    pub(crate) labels: Option<&'a [String]>,
}

impl SpinView<'_> {
    /// Opens the store `label`: access denied where the function is a Spin
    /// component whose manifest does not list it, as Spin answers
    /// (`global:NAME`, Luge's name for the store NAME on the Redis tier,
    /// is listed as NAME or as itself).
    pub(crate) fn open_store(&mut self, label: &str) -> Result<Resource<kv::Bucket>, KvError> {
        let plain = label.strip_prefix("global:").unwrap_or(label);
        if self.labels.is_some_and(|labels| {
            !labels
                .iter()
                .any(|granted| granted == label || granted == plain)
        }) {
            return Err(KvError::AccessDenied);
        }
        self.kv.open_bucket(label).map_err(|e| e.0)
    }
}

/// Spin's interfaces' host state, for the bindings.
pub(crate) struct HasSpin;

impl HasData for HasSpin {
    type Data<'a> = SpinView<'a>;
}

fn kv_error(error: KvError) -> key_value::Error {
    match error {
        KvError::NoSuchStore => key_value::Error::NoSuchStore,
        KvError::AccessDenied => key_value::Error::AccessDenied,
        KvError::Other(text) => key_value::Error::Other(text),
    }
}

/// Runs `op` on the open bucket `store` with the invocation's state.
fn with_bucket<T, R>(
    accessor: &Accessor<T, HasSpin>,
    store: &Resource<kv::Bucket>,
    op: impl FnOnce(&kv::Bucket, &dyn State) -> Result<R, KvError>,
) -> wasmtime::Result<Result<R, key_value::Error>> {
    accessor.with(|mut access| {
        let view = access.get();
        let bucket = view.kv.table.get(store)?;
        let Some(state) = view.kv.state else {
            return Ok(Err(key_value::Error::Other(
                "this host keeps no shared state".to_owned(),
            )));
        };
        Ok(op(bucket, &**state).map_err(kv_error))
    })
}

impl key_value::Host for SpinView<'_> {}

impl key_value::HostStore for SpinView<'_> {
    fn drop(&mut self, store: Resource<kv::Bucket>) -> wasmtime::Result<()> {
        self.kv.close_bucket(store)
    }
}

impl<T> key_value::HostStoreWithStore<T> for HasSpin {
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

impl variables::Host for SpinView<'_> {}

impl<T> variables::HostWithStore<T> for HasSpin {
    async fn get(
        accessor: &Accessor<T, Self>,
        name: String,
    ) -> wasmtime::Result<Result<String, variables::Error>> {
        accessor.with(|mut access| {
            let view = access.get();
            if let Err(why) = check_variable(&name, "") {
                return Ok(Err(variables::Error::InvalidName(why.to_string())));
            }
            Ok(view
                .variables
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, value)| value.clone())
                .ok_or(variables::Error::Undefined(name)))
        })
    }
}

/// Adds `spin:key-value@3.0.0` and `spin:variables@3.0.0` to `linker`.
pub(crate) fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    view: fn(&mut T) -> SpinView<'_>,
) -> wasmtime::Result<()> {
    key_value::add_to_linker::<_, HasSpin>(linker, view)?;
    variables::add_to_linker::<_, HasSpin>(linker, view)?;
    Ok(())
}
