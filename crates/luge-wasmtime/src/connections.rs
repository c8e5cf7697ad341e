//! What the bindings of Spin's connection interfaces share
//! (`spin:sqlite`, `spin:redis`, `spin:postgres`, `spin:mysql`): the view
//! of the store they work on, and a connection as the guest's resource
//! holds it. Each binding only adapts its WIT types to its crate.

use std::sync::Arc;
use std::time::Instant;

use luge_core::Action;
use wasmtime::AsContextMut;
use wasmtime::component::{FutureReader, Resource, ResourceTable, StreamReader};

/// A connection as the guest's resource holds it, shared with a call
/// still running when the guest drops it.
pub struct Handle<C>(pub(crate) Arc<C>);

/// What the bindings work on: the store's resource table, the action (its
/// name, grants and limits) and the invocation's deadline.
pub struct ConnectionsView<'a> {
    pub(crate) table: &'a mut ResourceTable,
    pub(crate) action: &'a Arc<Action>,
    pub(crate) deadline: Instant,
    /// The invocation's trace: each operation is a client span in it.
    pub(crate) trace: Option<&'a Arc<dyn luge_core::trace::Trace>>,
}

impl ConnectionsView<'_> {
    /// The span of one `operation` on a `system` (OpenTelemetry's
    /// `db.system.name`: `postgresql`, `mysql`, `sqlite`, `redis`; or a
    /// broker's), recorded when dropped; `None` when not traced. The
    /// statement is not recorded: it may hold a secret.
    pub(crate) fn span(
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
    pub(crate) fn opening(&self) -> (Arc<Action>, Instant) {
        (Arc::clone(self.action), self.deadline)
    }

    /// The connection `resource` names, and the deadline.
    pub(crate) fn held<C: Send + Sync + 'static>(
        &self,
        resource: &Resource<Handle<C>>,
    ) -> wasmtime::Result<(Arc<C>, Instant)> {
        Ok((Arc::clone(&self.table.get(resource)?.0), self.deadline))
    }

    /// `opened` kept in the table for the guest, or its error as the
    /// guest's (`error`).
    pub(crate) fn keep<C: Send + Sync + 'static, E, W>(
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
    pub(crate) fn close<C: Send + Sync + 'static>(
        &mut self,
        resource: Resource<Handle<C>>,
    ) -> wasmtime::Result<()> {
        self.table.delete(resource)?;
        Ok(())
    }
}

/// A WASI 0.3 answer of rows: the stream of them, and how it ended.
pub(crate) type RowsAnswer<R, E> = (StreamReader<R>, FutureReader<Result<(), E>>);

/// Rows read whole (within their bound) before the answer, as a WASI 0.3
/// call answers them: a stream that only hands them over, and a future
/// that says the statement ended well.
pub(crate) fn rows_answer<S: AsContextMut, R, E>(
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
