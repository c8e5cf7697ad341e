//! What every capability's Wasmtime component binding shares (Spin's
//! connection interfaces: `spin:sqlite`, `spin:redis`, `spin:postgres`,
//! `spin:mysql`, `spin:mqtt`): the view of the store it works on, a
//! connection as the guest's resource holds it, the bound on what one call
//! answers, and WASI 0.3 answers of rows. Each binding lives in its
//! capability's crate (behind its `component` feature) and only adapts its
//! WIT types to that crate; `luge-wasmtime` links them (its `SLICES`) and
//! builds the view from its store.
//!
//! It narrows Wasmtime to what a binding needs: a resource table, the
//! action (its name, grants, limits), the invocation's deadline and trace.

#![deny(missing_docs)]

use std::sync::Arc;
use std::time::Instant;

use luge_core::Action;
use wasmtime::AsContextMut;
use wasmtime::component::{Accessor, FutureReader, Resource, ResourceTable, StreamReader};

/// A connection as the guest's resource holds it, shared with a call
/// still running when the guest drops it.
pub struct Handle<C>(pub Arc<C>);

/// A binding's `generated` module: Wasmtime's `bindgen!` for the world
/// `$world` of Luge's one WIT root (`wit/`, two folders above the crate
/// that invokes it), with the options that follow (`imports`, `with`,
/// `trappable_error_type`...).
#[macro_export]
macro_rules! bindings {
    ($world:literal, $($options:tt)*) => {
        #[allow(missing_docs)] // generated
        mod generated {
            wasmtime::component::bindgen!({
                path: "../../wit",
                world: $world,
                $($options)*
            });
        }
    };
}

/// A binding's `pub fn add_to_linker`, with the doc comments given: it
/// adds each generated `interface` to a linker, each function over the
/// view the linker's `view` makes of the store (`$view`, a type with one
/// lifetime), as the host state `$has` (its `HasData`).
///
/// ```ignore
/// luge_binding::add_to_linker! {
///     /// Adds `spin:mqtt@3.0.0` to `linker`.
///     ConnectionsView as HasMqtt: mqtt
/// }
/// ```
#[macro_export]
macro_rules! add_to_linker {
    ($(#[$doc:meta])* $view:ident as $has:ty: $($interface:ident)::+ $(, $($more:ident)::+)* $(,)?) => {
        $(#[$doc])*
        pub fn add_to_linker<T: Send + 'static>(
            linker: &mut wasmtime::component::Linker<T>,
            view: fn(&mut T) -> $view<'_>,
        ) -> wasmtime::Result<()> {
            $($interface)::+::add_to_linker::<_, $has>(linker, view)?;
            $($($more)::+::add_to_linker::<_, $has>(linker, view)?;)*
            Ok(())
        }
    };
}

/// `$value` as the variant of the same name of the enum `$to`, for each
/// variant of `$from` listed (a unit variant, or `Name(x)`: one holding a
/// value, handed over as it is); the arms after `;` say what becomes of
/// the rest. What every conversion between a client's types and a WIT
/// version's is made of, where the names agree.
///
/// ```ignore
/// luge_binding::same_variant!(value, Value => DbValue: [Int8(x), Str(x)];
///     Value::Null => DbValue::DbNull)
/// ```
#[macro_export]
macro_rules! same_variant {
    ($value:expr, $from:ident => $to:ident: [$($variant:ident $(($x:ident))?),* $(,)?]
        $(; $($pattern:pat => $arm:expr),+ $(,)?)?) => {
        match $value {
            $($from::$variant $(($x))? => $to::$variant $(($x))?,)*
            $($($pattern => $arm,)+)?
        }
    };
}

/// Links, by hand, one function of an interface whose types are another
/// binding's (Wasmtime checks them structurally when a component is
/// instantiated): `$name` of `$instance` calls `$call` (an async function
/// of a `&mut ConnectionsView` and the arguments `$arg` of the types
/// `$ty`), over the store's view `$view`. With `resource`, the guest's
/// resource `$name` of connections `$handle`, closed when dropped.
#[macro_export]
macro_rules! linked {
    ($instance:ident, $view:ident, $name:literal, ($($arg:ident: $ty:ty),*) => $call:path) => {
        $instance.func_wrap_async($name, move |mut store, ($($arg,)*): ($($ty,)*)| {
            Box::new(async move {
                let mut view = $view(store.data_mut());
                Ok(($call(&mut view, $($arg),*).await?,))
            })
        })?;
    };
    ($instance:ident, $view:ident, resource $name:literal: $handle:ty) => {
        $instance.resource_async(
            $name,
            wasmtime::component::ResourceType::host::<$handle>(),
            move |mut store, rep| {
                Box::new(async move {
                    $view(store.data_mut()).close(wasmtime::component::Resource::<$handle>::new_own(rep))
                })
            },
        )?;
    };
}

/// The host state of every binding on [`ConnectionsView`] (what
/// `add_to_linker` takes as `HasData`).
pub struct HasConnections;

impl wasmtime::component::HasData for HasConnections {
    type Data<'a> = ConnectionsView<'a>;
}

/// What the bindings work on: the store's resource table, the action (its
/// name, grants and limits) and the invocation's deadline.
pub struct ConnectionsView<'a> {
    /// The store's resource table: the guest's connections and what else
    /// a binding hands it.
    pub table: &'a mut ResourceTable,
    /// The function: its name, grants and limits.
    pub action: &'a Arc<Action>,
    /// When the invocation's time runs out.
    pub deadline: Instant,
    /// The invocation's trace: each operation is a client span in it.
    pub trace: Option<&'a Arc<dyn luge_core::trace::Trace>>,
}

impl ConnectionsView<'_> {
    /// The span of one `operation` on a `system` (OpenTelemetry's
    /// `db.system.name`: `postgresql`, `mysql`, `sqlite`, `redis`; or a
    /// broker's), recorded when dropped; `None` when not traced. The
    /// statement is not recorded: it may hold a secret.
    pub fn span(
        &self,
        family: luge_core::trace::HostCall,
        system: &'static str,
        operation: &'static str,
    ) -> Option<luge_core::trace::HostSpan> {
        let mut span =
            luge_core::trace::HostSpan::start(self.trace, family, format!("{operation} {system}"))?;
        match family {
            luge_core::trace::HostCall::Messaging => {
                span.set("messaging.system", system);
                span.set("messaging.operation.name", operation);
            }
            _ => {
                span.set("db.system.name", system);
                span.set("db.operation.name", operation);
            }
        }
        Some(span)
    }

    /// The action and the deadline, taken before awaiting an open.
    pub fn opening(&self) -> Opening {
        Opening {
            action: Arc::clone(self.action),
            deadline: self.deadline,
        }
    }

    /// The connection `resource` names, and the deadline.
    pub fn held<C: Send + Sync + 'static>(
        &self,
        resource: &Resource<Handle<C>>,
    ) -> wasmtime::Result<(Arc<C>, Instant)> {
        Ok((Arc::clone(&self.table.get(resource)?.0), self.deadline))
    }

    /// What every operation on a connection starts with: the connection
    /// `resource` names, the deadline, and the span of `operation` on a
    /// `system` (see [`Self::span`]).
    pub fn operation<C: Send + Sync + 'static>(
        &self,
        resource: &Resource<Handle<C>>,
        family: luge_core::trace::HostCall,
        system: &'static str,
        operation: &'static str,
    ) -> wasmtime::Result<(Arc<C>, Instant, Option<luge_core::trace::HostSpan>)> {
        let span = self.span(family, system, operation);
        let (connection, deadline) = self.held(resource)?;
        Ok((connection, deadline, span))
    }

    /// `opened` kept in the table for the guest, or its error as the
    /// guest's (`error`).
    pub fn keep<C: Send + Sync + 'static, E, W>(
        &mut self,
        opened: Result<C, E>,
        error: impl FnOnce(E) -> W,
    ) -> wasmtime::Result<Result<Resource<Handle<C>>, W>> {
        match opened {
            Ok(connection) => Ok(Ok(self.table.push(Handle(Arc::new(connection)))?)),
            Err(e) => Ok(Err(error(e))),
        }
    }

    /// Drops the guest's `resource` (a call still running keeps the
    /// connection until it ends).
    pub fn close<C: Send + Sync + 'static>(
        &mut self,
        resource: Resource<Handle<C>>,
    ) -> wasmtime::Result<()> {
        self.table.delete(resource)?;
        Ok(())
    }
}

/// What opening a connection takes from the store before it awaits: the
/// action and the invocation's deadline.
pub struct Opening {
    /// The function: its name, grants and limits.
    pub action: Arc<Action>,
    /// When the invocation's time runs out.
    pub deadline: Instant,
}

impl Opening {
    /// The caller as a client of `luge-outbound`'s family takes it, its
    /// answers bounded by [`max_answer_bytes`].
    pub fn caller(&self) -> luge_outbound::Caller<'_> {
        luge_outbound::Caller {
            function: &self.action.name,
            grants: &self.action.capabilities.outbound,
            deadline: self.deadline,
            max_answer_bytes: max_answer_bytes(&self.action),
        }
    }

    /// `opened`, a refusal logged first with `system` (`postgres`,
    /// `redis`...): the guest is told only what its interface can say.
    pub fn logged<C, E: std::fmt::Display>(
        &self,
        system: &str,
        opened: Result<C, E>,
    ) -> Result<C, E> {
        if let Err(e) = &opened {
            tracing::debug!(function = %self.action.name, error = %e, "outbound {system} refused");
        }
        opened
    }
}

/// A WASI 0.3 answer of rows: the stream of them, and how it ended.
pub type RowsAnswer<R, E> = (StreamReader<R>, FutureReader<Result<(), E>>);

/// A WASI 0.3 `query`'s result: the columns, the rows' stream and how it
/// ended, or the guest's error `E`.
pub type QueryAnswer<C, R, E> = Result<(Vec<C>, StreamReader<R>, FutureReader<Result<(), E>>), E>;

/// The store's view for a WASI 0.3 binding: what its `accessor` reaches.
pub type Access<T> = Accessor<T, HasConnections>;

/// [`ConnectionsView::operation`] from a WASI 0.3 binding's `accessor`:
/// the connection, the deadline and the span.
pub fn operation_in<T, C: Send + Sync + 'static>(
    accessor: &Access<T>,
    resource: &Resource<Handle<C>>,
    family: luge_core::trace::HostCall,
    system: &'static str,
    operation: &'static str,
) -> wasmtime::Result<(Arc<C>, Instant, Option<luge_core::trace::HostSpan>)> {
    accessor.with(|mut access| access.get().operation(resource, family, system, operation))
}

/// [`ConnectionsView::opening`] from a WASI 0.3 binding's `accessor`.
pub fn opening_in<T>(accessor: &Access<T>) -> Opening {
    accessor.with(|mut access| access.get().opening())
}

/// [`ConnectionsView::keep`] from a WASI 0.3 binding's `accessor`.
pub fn keep_in<T, C: Send + Sync + 'static, E, W>(
    accessor: &Access<T>,
    opened: Result<C, E>,
    error: impl FnOnce(E) -> W,
) -> wasmtime::Result<Result<Resource<Handle<C>>, W>> {
    accessor.with(|mut access| access.get().keep(opened, error))
}

/// A WASI 0.3 `query`'s answer from `columns` and `rows` read whole (see
/// [`rows_answer`]), or its error.
pub fn query_answer<T, C, R, E>(
    accessor: &Access<T>,
    read: Result<(Vec<C>, Vec<R>), E>,
) -> wasmtime::Result<QueryAnswer<C, R, E>>
where
    R: wasmtime::component::Lower + wasmtime::component::Lift + Send + Sync + Unpin + 'static,
    Result<(), E>: wasmtime::component::Lower + wasmtime::component::Lift + Send + Sync + 'static,
{
    let (columns, rows) = match read {
        Ok(read) => read,
        Err(e) => return Ok(Err(e)),
    };
    accessor.with(|mut access| {
        let (rows, ended) = rows_answer(&mut access, rows)?;
        Ok(Ok((columns, rows, ended)))
    })
}

/// Rows read whole (within their bound) before the answer, as a WASI 0.3
/// call answers them: a stream that only hands them over, and a future
/// that says the statement ended well.
pub fn rows_answer<S: AsContextMut, R, E>(
    mut store: S,
    rows: Vec<R>,
) -> wasmtime::Result<RowsAnswer<R, E>>
where
    R: wasmtime::component::Lower + wasmtime::component::Lift + Send + Sync + Unpin + 'static,
    Result<(), E>: wasmtime::component::Lower + wasmtime::component::Lift + Send + Sync + 'static,
{
    let rows = StreamReader::new(&mut store, rows)?;
    let ended = FutureReader::new(
        &mut store,
        std::future::ready(Ok::<_, wasmtime::Error>(Ok(()))),
    )?;
    Ok((rows, ended))
}

/// The most bytes one host call answers a function with (a database's
/// rows, a Redis reply): its memory limit, since the answer is copied
/// into it, and at most 64 MiB, so that one call of a function with a
/// large limit cannot hold more of the host's memory than that.
pub fn max_answer_bytes(action: &Action) -> usize {
    usize::try_from(action.limits.memory_bytes)
        .unwrap_or(usize::MAX)
        .min(64 << 20)
}
