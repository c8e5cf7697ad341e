//! The `luge` import module's state functions (host API v1) on Wasmer:
//! each hands the guest's memory (a view of this thread's, see
//! [`crate::calls`]) and the invocation's state
//! ([`luge_core::state::on_this_thread`]) to [`luge_core::state::abi`].
//! A Wasmer sandbox cannot park, so `state_lock` sleeps while it waits.

use luge_core::state::{GuestMemory, StateError, abi, on_this_thread};
use wasmer::{Function, FunctionEnv, FunctionEnvMut, Memory, StoreMut};

/// Guest memory through a view.
struct View<'e, 'a> {
    memory: Memory,
    env: &'e FunctionEnvMut<'a, ()>,
}

impl GuestMemory for View<'_, '_> {
    fn read(&mut self, ptr: i32, len: i32) -> Result<Vec<u8>, StateError> {
        let ptr = u64::try_from(ptr).map_err(|_| StateError::BadArgument)?;
        let len = usize::try_from(len).map_err(|_| StateError::BadArgument)?;
        let view = self.memory.view(self.env);
        // Checked before allocating: a guest cannot make the host allocate
        // more than its own memory holds.
        if ptr
            .checked_add(len as u64)
            .is_none_or(|end| end > view.data_size())
        {
            return Err(StateError::BadArgument);
        }
        let mut bytes = vec![0; len];
        view.read(ptr, &mut bytes)
            .map_err(|_| StateError::BadArgument)?;
        Ok(bytes)
    }

    fn write(&mut self, ptr: i32, bytes: &[u8]) -> Result<(), StateError> {
        let ptr = u64::try_from(ptr).map_err(|_| StateError::BadArgument)?;
        self.memory
            .view(self.env)
            .write(ptr, bytes)
            .map_err(|_| StateError::BadArgument)
    }
}

/// Runs `f` on this thread's state and the guest's memory.
fn with<T: From<i32>>(
    env: &FunctionEnvMut<'_, ()>,
    f: impl FnOnce(Option<&dyn luge_core::state::State>, &mut dyn GuestMemory) -> T,
) -> T {
    let Ok(memory) = crate::calls::memory() else {
        return T::from(StateError::BadArgument.code());
    };
    let state = on_this_thread::current();
    f(state.as_deref(), &mut View { memory, env })
}

type E<'a> = FunctionEnvMut<'a, ()>;

fn get(e: E<'_>, k: i32, kl: i32, b: i32, bl: i32, f: i32) -> i64 {
    with(&e, |s, m| abi::get(s, m, (k, kl, b, bl, f)))
}

fn set(e: E<'_>, k: i32, kl: i32, v: i32, vl: i32, f: i32) -> i32 {
    with(&e, |s, m| abi::set(s, m, (k, kl, v, vl, f)))
}

fn delete(e: E<'_>, k: i32, kl: i32, f: i32) -> i32 {
    with(&e, |s, m| abi::delete(s, m, (k, kl, f)))
}

fn append(e: E<'_>, k: i32, kl: i32, v: i32, vl: i32, f: i32) -> i64 {
    with(&e, |s, m| abi::append(s, m, (k, kl, v, vl, f)))
}

#[allow(clippy::too_many_arguments)] // the import's signature
fn cas(e: E<'_>, k: i32, kl: i32, o: i32, ol: i32, n: i32, nl: i32, f: i32) -> i32 {
    with(&e, |s, m| abi::cas(s, m, (k, kl, o, ol, n, nl, f)))
}

fn add(e: E<'_>, k: i32, kl: i32, d: i64, f: i32) -> i64 {
    with(&e, |s, m| abi::add(s, m, (k, kl, d, f)))
}

fn pull(e: E<'_>, k: i32, kl: i32) -> i32 {
    with(&e, |s, m| abi::pull(s, m, (k, kl)))
}

fn push(e: E<'_>, k: i32, kl: i32) -> i32 {
    with(&e, |s, m| abi::push(s, m, (k, kl)))
}

fn lock(e: E<'_>, k: i32, kl: i32, lease: i32) -> i32 {
    with(&e, |s, m| abi::lock_blocking(s, m, (k, kl, lease)))
}

fn unlock(e: E<'_>, k: i32, kl: i32) -> i32 {
    with(&e, |s, m| abi::unlock(s, m, (k, kl)))
}

/// The state functions, to add to the `luge` namespace.
pub(crate) fn exports(
    store: &mut StoreMut,
    env: &FunctionEnv<()>,
) -> Vec<(&'static str, Function)> {
    vec![
        ("state_get", Function::new_typed_with_env(store, env, get)),
        ("state_set", Function::new_typed_with_env(store, env, set)),
        (
            "state_delete",
            Function::new_typed_with_env(store, env, delete),
        ),
        (
            "state_append",
            Function::new_typed_with_env(store, env, append),
        ),
        ("state_cas", Function::new_typed_with_env(store, env, cas)),
        ("state_add", Function::new_typed_with_env(store, env, add)),
        ("state_pull", Function::new_typed_with_env(store, env, pull)),
        ("state_push", Function::new_typed_with_env(store, env, push)),
        ("state_lock", Function::new_typed_with_env(store, env, lock)),
        (
            "state_unlock",
            Function::new_typed_with_env(store, env, unlock),
        ),
    ]
}
