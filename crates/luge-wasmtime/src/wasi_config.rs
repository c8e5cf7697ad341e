//! `wasi:config/store` from the route's variables, at both versions that
//! components import: `0.2.0-rc.1` (componentize-py, Wasmtime's
//! `wasmtime-wasi-config`) and `0.2.0-draft-2024-09-27` (`spin-sdk` 7,
//! Spin 4). The two interfaces are the same; one lookup serves both, over
//! the action's variables as they are (nothing is copied per invocation).
//! A variable's value is handed to the function that was given it and to
//! no log. The WIT is theirs (Luge's WIT root wit/, deps/config-rc1 and deps/config-draft; Apache-2.0 WITH
//! LLVM-exception).

use wasmtime::component::HasData;

mod generated {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "luge:worlds/host-config",
        imports: { default: trappable },
    });
}

use generated::wasi::config0_2_0_draft_2024_09_27::store as draft;
use generated::wasi::config0_2_0_rc_1::store as rc1;

/// What `wasi:config/store` reads: the action's variables.
pub(crate) struct ConfigView<'a> {
    pub(crate) variables: &'a [(String, String)],
}

impl ConfigView<'_> {
    fn get(&self, key: &str) -> Option<String> {
        self.variables
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.clone())
    }

    fn all(&self) -> Vec<(String, String)> {
        self.variables.to_vec()
    }
}

/// The bindings' host state.
struct HasConfig;

impl HasData for HasConfig {
    type Data<'a> = ConfigView<'a>;
}

impl rc1::Host for ConfigView<'_> {
    fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, rc1::Error>> {
        Ok(Ok(ConfigView::get(self, &key)))
    }

    fn get_all(&mut self) -> wasmtime::Result<Result<Vec<(String, String)>, rc1::Error>> {
        Ok(Ok(self.all()))
    }
}

impl draft::Host for ConfigView<'_> {
    fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, draft::Error>> {
        Ok(Ok(ConfigView::get(self, &key)))
    }

    fn get_all(&mut self) -> wasmtime::Result<Result<Vec<(String, String)>, draft::Error>> {
        Ok(Ok(self.all()))
    }
}

/// Adds both versions of `wasi:config/store` to `linker`.
pub(crate) fn add_to_linker<T: 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    view: fn(&mut T) -> ConfigView<'_>,
) -> wasmtime::Result<()> {
    rc1::add_to_linker::<_, HasConfig>(linker, view)?;
    draft::add_to_linker::<_, HasConfig>(linker, view)?;
    Ok(())
}
