//! `fermyon:spin/sqlite@2.0.0`, as spin-sdk 2 and 3 (and wit-bindgen
//! against Spin 2's WIT) import it, bound to the very code
//! `spin:sqlite@3.1.0` ([`super::sqlite`]) is: the same labels, deadline
//! and bound on rows. Synchronous for the guest; its host functions await
//! the blocking pool. The WIT is `spin-sdk` 3.1.1's (Luge's WIT root wit/,
//! deps/fermyon-spin2; Apache-2.0 WITH LLVM-exception).

use wasmtime::component::Resource;

use super::sqlite::HasSqlite;
use luge_binding::ConnectionsView;

luge_binding::bindings!("luge:worlds/host-spin2-sqlite",
    imports: { default: async | trappable },
    with: {
        "fermyon:spin/sqlite@2.0.0.connection": crate::component::sqlite::SqliteConnection,
    },
);

use generated::fermyon::spin2_0_0::sqlite;

super::sqlite::conversions!(sqlite, {});

luge_binding::add_to_linker! {
    /// Adds `fermyon:spin/sqlite@2.0.0` to `linker`.
    ConnectionsView as HasSqlite: sqlite
}
