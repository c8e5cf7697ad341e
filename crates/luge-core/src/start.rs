//! Start functions, moved where the time limit reaches them.
//!
//! A module's start function runs when the module is instantiated: in
//! WAMR inside `wasm_runtime_instantiate`, before any instance exists for
//! the watchdog to terminate (and Luge serializes WAMR's instantiation per
//! module); in Wasmer inside instantiation too, and a trap there is
//! reported as a failed instantiation. A start function that never
//! returns would hold a worker, and with WAMR every later instantiation
//! of the module, forever. So those engines load the module with its start
//! section removed and the start function exported as [`START_EXPORT`];
//! their sandboxes call it first, under the watchdog, exactly where the
//! Wasm spec runs it (after the data and element segments are applied,
//! before any export is called), and it ends like any run: a trap, the
//! time limit, an exit. Wasmtime bounds instantiation with the same epoch
//! deadline as the run and needs none of this.

/// The export the start function is moved to. Not a name a guest can use:
/// [`defer_start`] refuses a module that already exports it, and engines
/// leave it out of the module's entry points.
pub const START_EXPORT: &str = "luge:start";

/// A module exports [`START_EXPORT`] itself.
#[derive(Debug, thiserror::Error)]
#[error("the module exports {START_EXPORT:?}, a name Luge reserves")]
pub struct ReservedExport;

const EXPORT_SECTION: u8 = 7;
const FUNC_KIND: u8 = 0x00;

/// `wasm` with its start section turned into the export [`START_EXPORT`],
/// and whether it had one. Input that is not a well-formed core module
/// (or is a component) is returned unchanged, for the engine to refuse in
/// its own words.
pub fn defer_start(wasm: Vec<u8>) -> Result<(Vec<u8>, bool), ReservedExport> {
    let Some(plan) = plan(&wasm)? else {
        return Ok((wasm, false));
    };
    let mut exports = Vec::new();
    leb(&mut exports, plan.export_count + 1);
    exports.extend_from_slice(&wasm[plan.export_entries.clone()]);
    leb(&mut exports, START_EXPORT.len() as u32);
    exports.extend_from_slice(START_EXPORT.as_bytes());
    exports.push(FUNC_KIND);
    leb(&mut exports, plan.start_function);
    let mut section = vec![EXPORT_SECTION];
    leb(&mut section, exports.len() as u32);
    section.extend_from_slice(&exports);

    // The export section comes before the start section; without one, the
    // new one takes the start section's place, which the section order
    // allows (exports come right before the start).
    let mut out = Vec::with_capacity(wasm.len() + section.len());
    match plan.export_section {
        Some(old) => {
            out.extend_from_slice(&wasm[..old.start]);
            out.extend_from_slice(&section);
            out.extend_from_slice(&wasm[old.end..plan.start_section.start]);
        }
        None => {
            out.extend_from_slice(&wasm[..plan.start_section.start]);
            out.extend_from_slice(&section);
        }
    }
    out.extend_from_slice(&wasm[plan.start_section.end..]);
    Ok((out, true))
}

/// Refuses a core module that exports [`START_EXPORT`] itself, as
/// [`defer_start`] does, for an engine that runs start functions itself
/// (Wasmtime) and rewrites nothing: every engine refuses such a module
/// alike. Anything else (not well-formed, a component) passes, for the
/// engine to judge.
pub fn refuse_reserved(wasm: &[u8]) -> Result<(), ReservedExport> {
    plan(wasm).map(drop)
}

/// Where the rewrite cuts, in `wasm`'s bytes.
struct Plan {
    start_function: u32,
    /// The whole start section, header included.
    start_section: std::ops::Range<usize>,
    /// The whole export section, header included, if there is one.
    export_section: Option<std::ops::Range<usize>>,
    /// Its entries (its content after the count).
    export_entries: std::ops::Range<usize>,
    export_count: u32,
}

fn plan(wasm: &[u8]) -> Result<Option<Plan>, ReservedExport> {
    let mut start = None;
    let mut export_section = None;
    let mut export_entries = 0..0;
    let mut export_count = 0;
    // Sections follow one another: each header starts where the previous
    // section's content ended.
    let mut section_start = 8;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else {
            return Ok(None);
        };
        match &payload {
            wasmparser::Payload::Version {
                encoding: wasmparser::Encoding::Component,
                ..
            } => return Ok(None),
            wasmparser::Payload::ExportSection(reader) => {
                for export in reader.clone() {
                    let Ok(export) = export else {
                        return Ok(None);
                    };
                    if export.name == START_EXPORT {
                        return Err(ReservedExport);
                    }
                }
                let content = reader.range();
                let count_len = leb_len(&wasm[content.start..]);
                export_section = Some(section_start..content.end);
                export_entries = content.start + count_len..content.end;
                export_count = reader.count();
            }
            wasmparser::Payload::StartSection { func, range } => {
                start = Some((*func, section_start..range.end));
            }
            _ => {}
        }
        if let Some((_, range)) = payload.as_section() {
            section_start = range.end;
        }
    }
    Ok(start.map(|(start_function, start_section)| Plan {
        start_function,
        start_section,
        export_section,
        export_entries,
        export_count,
    }))
}

/// Appends `value` as unsigned LEB128.
fn leb(out: &mut Vec<u8>, mut value: u32) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// The length of the LEB128 number at the front of `bytes` (wasmparser
/// already read it, so it is well formed).
fn leb_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .position(|b| b & 0x80 == 0)
        .map_or(bytes.len(), |at| at + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exports(wasm: &[u8]) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        for payload in wasmparser::Parser::new(0).parse_all(wasm) {
            if let wasmparser::Payload::ExportSection(r) = payload.unwrap() {
                for e in r {
                    let e = e.unwrap();
                    out.push((e.name.to_owned(), e.index));
                }
            }
        }
        out
    }

    fn has_start(wasm: &[u8]) -> bool {
        wasmparser::Parser::new(0)
            .parse_all(wasm)
            .any(|p| matches!(p, Ok(wasmparser::Payload::StartSection { .. })))
    }

    /// A module with functions `f0` (the start) and `f1`, a memory, and
    /// `exports` exports of `f1`; built with wasm-encoder.
    fn module(exports: usize) -> Vec<u8> {
        use wasm_encoder::*;
        let mut m = Module::new();
        let mut types = TypeSection::new();
        types.ty().function([], []);
        m.section(&types);
        let mut funcs = FunctionSection::new();
        funcs.function(0);
        funcs.function(0);
        m.section(&funcs);
        let mut mems = MemorySection::new();
        mems.memory(MemoryType {
            minimum: 1,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        m.section(&mems);
        if exports > 0 {
            let mut ex = ExportSection::new();
            for i in 0..exports {
                ex.export(&format!("e{i}"), ExportKind::Func, 1);
            }
            m.section(&ex);
        }
        m.section(&StartSection { function_index: 0 });
        let mut code = CodeSection::new();
        for _ in 0..2 {
            let mut f = Function::new([]);
            f.instructions().end();
            code.function(&f);
        }
        m.section(&code);
        m.finish()
    }

    #[test]
    fn the_start_becomes_an_export_and_the_module_stays_valid() {
        // 200 exports: a count that takes two LEB bytes and grows to stay
        // two; 127 -> 128 crosses from one byte to two.
        for n in [0, 1, 127, 200] {
            let (out, moved) = defer_start(module(n)).unwrap();
            assert!(moved);
            assert!(!has_start(&out), "{n} exports: start section gone");
            wasmparser::Validator::new()
                .validate_all(&out)
                .unwrap_or_else(|e| panic!("{n} exports: {e}"));
            let ex = exports(&out);
            assert_eq!(ex.len(), n + 1);
            assert_eq!(ex.last().unwrap(), &(START_EXPORT.to_owned(), 0));
        }
    }

    #[test]
    fn modules_without_a_start_and_malformed_input_are_unchanged() {
        let wat = wasm_encoder::Module::new().finish();
        assert_eq!(defer_start(wat.clone()).unwrap(), (wat, false));
        let junk = b"\0asm\x01\0\0\0\x07\xff".to_vec();
        assert_eq!(defer_start(junk.clone()).unwrap(), (junk, false));
    }

    #[test]
    fn a_module_exporting_the_reserved_name_is_refused() {
        let wasm = wat::parse_str(format!(r#"(module (func (export "{START_EXPORT}")))"#));
        assert!(defer_start(wasm.unwrap()).is_err());
    }
}
