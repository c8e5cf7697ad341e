//! What the bindings of Spin's connection interfaces share
//! (`spin:sqlite`, `spin:redis`, `spin:postgres`, `spin:mysql`): the view
//! of the store they work on, and a connection as the guest's resource
//! holds it. Each binding only adapts its WIT types to its crate.

use std::sync::Arc;
use std::time::Instant;

use luge_core::Action;
use wasmtime::component::{Resource, ResourceTable};

/// A connection as the guest's resource holds it, shared with a call
/// still running when the guest drops it.
pub struct Handle<C>(pub(crate) Arc<C>);

/// What the bindings work on: the store's resource table, the action (its
/// name, grants and limits) and the invocation's deadline.
pub struct ConnectionsView<'a> {
    pub(crate) table: &'a mut ResourceTable,
    pub(crate) action: &'a Arc<Action>,
    pub(crate) deadline: Instant,
}

impl ConnectionsView<'_> {
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
