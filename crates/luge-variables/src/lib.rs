//! Luge's variables for components: the interfaces through which a
//! function reads the variables its route gave it, each a lookup in the
//! action's variables as they are (nothing is copied per invocation). A
//! variable's value is handed to the function that was given it and to no
//! log. Which variables a route has, and their names' rules
//! ([`luge_core::capabilities::check_variable`]), are settled where the
//! manifest is read; this crate only serves them, linked by
//! `luge-wasmtime` (its `SLICES`):
//!
//! - `wasi:config/store` at both versions components import:
//!   `0.2.0-rc.1` (componentize-py, Wasmtime's `wasmtime-wasi-config`) and
//!   `0.2.0-draft-2024-09-27` (`spin-sdk` 7, Spin 4); the two interfaces
//!   are the same;
//! - `spin:variables@3.0.0` (Spin 4, `spin-sdk` 7; a WASI 0.3 `async func`
//!   that completes at once);
//! - `fermyon:spin/variables@2.0.0` (spin-sdk 2 and 3).
//!
//! Spin's two check the name first, as Spin does, and answer `undefined`
//! for a name the route lacks. The WIT is theirs (Luge's WIT root wit/,
//! deps/config-rc1, deps/config-draft, deps/spin-variables and
//! deps/fermyon-spin2; Apache-2.0 WITH LLVM-exception).

#![deny(missing_docs)]

use luge_core::capabilities::check_variable;
use wasmtime::component::{Accessor, HasData};

luge_binding::bindings!("luge:worlds/host-variables",
    imports: { default: trappable },
);

use generated::fermyon::spin2_0_0::variables as spin2;
use generated::spin::variables::variables as spin3;
use generated::wasi::config0_2_0_draft_2024_09_27::store as draft;
use generated::wasi::config0_2_0_rc_1::store as rc1;

/// What the bindings read: the action's variables.
pub struct VariablesView<'a> {
    /// Each variable's name and value.
    pub variables: &'a [(String, String)],
}

impl VariablesView<'_> {
    fn get(&self, key: &str) -> Option<String> {
        self.variables
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.clone())
    }

    fn all(&self) -> Vec<(String, String)> {
        self.variables.to_vec()
    }

    /// Spin's lookup: the name checked as Spin checks it, then its value.
    fn spin_get(&self, name: String) -> Result<String, SpinRefusal> {
        if let Err(why) = check_variable(&name, "") {
            return Err(SpinRefusal::InvalidName(why.to_string()));
        }
        self.get(&name).ok_or(SpinRefusal::Undefined(name))
    }
}

/// Why Spin's `get` answered no value; both of Spin's versions tell the
/// same two apart.
enum SpinRefusal {
    InvalidName(String),
    Undefined(String),
}

/// The bindings' host state.
pub struct HasVariables;

impl HasData for HasVariables {
    type Data<'a> = VariablesView<'a>;
}

impl rc1::Host for VariablesView<'_> {
    fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, rc1::Error>> {
        Ok(Ok(VariablesView::get(self, &key)))
    }

    fn get_all(&mut self) -> wasmtime::Result<Result<Vec<(String, String)>, rc1::Error>> {
        Ok(Ok(self.all()))
    }
}

impl draft::Host for VariablesView<'_> {
    fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, draft::Error>> {
        Ok(Ok(VariablesView::get(self, &key)))
    }

    fn get_all(&mut self) -> wasmtime::Result<Result<Vec<(String, String)>, draft::Error>> {
        Ok(Ok(self.all()))
    }
}

impl spin2::Host for VariablesView<'_> {
    fn get(&mut self, name: String) -> wasmtime::Result<Result<String, spin2::Error>> {
        Ok(self.spin_get(name).map_err(|refused| match refused {
            SpinRefusal::InvalidName(why) => spin2::Error::InvalidName(why),
            SpinRefusal::Undefined(name) => spin2::Error::Undefined(name),
        }))
    }
}

impl spin3::Host for VariablesView<'_> {}

impl<T> spin3::HostWithStore<T> for HasVariables {
    async fn get(
        accessor: &Accessor<T, Self>,
        name: String,
    ) -> wasmtime::Result<Result<String, spin3::Error>> {
        let answer = accessor.with(|mut access| access.get().spin_get(name));
        Ok(answer.map_err(|refused| match refused {
            SpinRefusal::InvalidName(why) => spin3::Error::InvalidName(why),
            SpinRefusal::Undefined(name) => spin3::Error::Undefined(name),
        }))
    }
}

luge_binding::add_to_linker! {
    /// Adds both versions of `wasi:config/store` and `fermyon:spin/variables@2.0.0`
    /// (synchronous) to `linker`.
    VariablesView as HasVariables: rc1, draft, spin2
}

/// Adds `spin:variables@3.0.0` (an `async func`: the concurrent engine's
/// linker only) to `linker`.
pub fn add_spin3_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    view: fn(&mut T) -> VariablesView<'_>,
) -> wasmtime::Result<()> {
    spin3::add_to_linker::<_, HasVariables>(linker, view)
}
