//! Plain modules made components at load, as `spin up` makes them: a core
//! module built against a WIT world (wit-bindgen leaves the world it was
//! built for in `component-type` custom sections: Spin's SDKs, and the
//! `wasm32-unknown-unknown` and `wasm32-wasip1` builds of Spin's
//! conformance suite) is wrapped into the component it describes with
//! `wit-component`, and its WASI preview 1 imports, if any, are served
//! through the adapter Wasmtime publishes (this release's, compiled in).
//! The component is then compiled and cached like any other: the compile
//! cache is keyed by the module the operator gave.
//!
//! A module without such a section is a WASI command or an OpenWhisk
//! action and is left as it is.

#![deny(missing_docs)]

use luge_core::EngineError;
use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_PROXY_ADAPTER,
    WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};

/// The export a `wasi:http` handler module has (wit-bindgen's name for
/// the incoming handler's `handle`).
const HTTP_HANDLER_EXPORTS: &[&str] = &[
    "wasi:http/incoming-handler@0.2.0#handle",
    "wasi:http/incoming-handler@0.2.1#handle",
    "wasi:http/incoming-handler@0.2.2#handle",
    "wasi:http/incoming-handler@0.2.3#handle",
    "wasi:http/incoming-handler@0.2.4#handle",
    "wasi:http/incoming-handler@0.2.5#handle",
    "wasi:http/incoming-handler@0.2.6#handle",
];

/// What a core module says of itself, read in one pass.
#[derive(Debug, Default, PartialEq, Eq)]
struct Shape {
    /// It carries a WIT world (`component-type*` custom sections).
    world: bool,
    /// It imports WASI preview 1.
    preview1: bool,
    /// It exports a `wasi:http` handler.
    http_handler: bool,
}

fn shape(wasm: &[u8]) -> Shape {
    use wasmparser::{Parser, Payload};
    let mut shape = Shape::default();
    for payload in Parser::new(0).parse_all(wasm) {
        // An unreadable module is left to the compiler, which says why.
        let Ok(payload) = payload else {
            return Shape::default();
        };
        match payload {
            Payload::CustomSection(section) if section.name().starts_with("component-type") => {
                shape.world = true;
            }
            Payload::ImportSection(imports) => {
                for import in imports.into_imports().flatten() {
                    if import.module == WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME {
                        shape.preview1 = true;
                    }
                }
            }
            Payload::ExportSection(exports) => {
                for export in exports.into_iter().flatten() {
                    if HTTP_HANDLER_EXPORTS.contains(&export.name) {
                        shape.http_handler = true;
                    }
                }
            }
            _ => {}
        }
    }
    shape
}

/// The component `wasm` describes, if it is a core module that carries
/// a WIT world; `None` for every other module (and for components).
pub fn componentize(wasm: &[u8]) -> Option<Result<Vec<u8>, EngineError>> {
    if luge_core::is_component(wasm) {
        return None;
    }
    let shape = shape(wasm);
    if !shape.world {
        return None;
    }
    Some(
        encode(wasm, &shape)
            .map_err(|e| EngineError::InvalidModule(Box::new(NotAComponent(e.into())))),
    )
}

/// A core module whose WIT world does not describe it.
#[derive(Debug, thiserror::Error)]
#[error(
    "this module carries a WIT world (wit-bindgen's `component-type` section) but is no component of it"
)]
pub struct NotAComponent(#[source] luge_core::error::Cause);

fn encode(wasm: &[u8], shape: &Shape) -> anyhow::Result<Vec<u8>> {
    let mut encoder = wit_component::ComponentEncoder::default()
        .validate(true)
        .module(wasm)?;
    if shape.preview1 {
        // A handler gets the adapter of `wasi:http/proxy`'s world (no
        // filesystem, no sockets); anything else the reactor's.
        let adapter = if shape.http_handler {
            WASI_SNAPSHOT_PREVIEW1_PROXY_ADAPTER
        } else {
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER
        };
        encoder = encoder.adapter(WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, adapter)?;
    }
    encoder.encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_without_a_world_is_left_alone() {
        let command = wat::parse_str(
            r#"(module
                (import "wasi_snapshot_preview1" "proc_exit" (func (param i32)))
                (func (export "_start")))"#,
        )
        .unwrap();
        assert!(componentize(&command).is_none());
        assert_eq!(
            shape(&command),
            Shape {
                world: false,
                preview1: true,
                http_handler: false
            }
        );
    }

    #[test]
    fn a_module_with_a_broken_world_is_refused_with_the_reason() {
        // A `component-type` section that is no encoded world.
        let mut module = wat::parse_str("(module)").unwrap();
        let name = b"component-type:broken";
        let body = [&[name.len() as u8][..], name, b"not a world"].concat();
        module.push(0);
        module.push(body.len() as u8);
        module.extend_from_slice(&body);
        let refused = componentize(&module).unwrap().unwrap_err();
        let line = luge_core::error_line(&refused);
        assert!(line.contains("WIT world"), "{line}");
    }
}
