//! The interfaces of the events' worlds ([`crate::events`]) that only
//! hold types: a component woken by events imports them, and the linker
//! gives each an empty instance.

use wasmtime::component::Linker;

/// `fermyon:spin-cron`'s, `spin:mqtt-trigger`'s and Spin 2's Redis types.
const TYPE_ONLY: &[&str] = &[
    "fermyon:spin/redis-types",
    "fermyon:spin-cron/cron-types@2.0.0",
    "spin:mqtt-trigger/spin-mqtt-types@3.0.0",
];

/// Adds the empty instances of [`TYPE_ONLY`] to `linker`.
pub(crate) fn add_to_linker<T>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    for name in TYPE_ONLY {
        linker.instance(name)?;
    }
    Ok(())
}
