//! Reads (or with `write`, writes) `path` inside the granted directories.
//! With `rename_to` it renames `path`; with `symlink_to` it makes `path` a
//! symlink to that target: what a hostile tenant tries on its own grants.
//! With `append` it appends that text to `path` (created if absent): one
//! line per run is a ledger of how often a function ran.
//! `ops`, a list of such parameter objects, runs them in order in one
//! invocation and answers with the last one's result.
use luge_action::{Error, Value, json};

unsafe extern "C" {
    /// wasi-libc's symlink(2), which std does not expose on stable.
    fn symlink(target: *const std::ffi::c_char, link: *const std::ffi::c_char) -> i32;
}

fn files(params: Value) -> Result<Value, Error> {
    if let Some(ops) = params["ops"].as_array() {
        let mut last = Value::Null;
        for op in ops {
            last = files(op.clone())?;
        }
        return Ok(last);
    }
    let path = params["path"].as_str().ok_or("missing path")?;
    if let Some(to) = params["rename_to"].as_str() {
        std::fs::rename(path, to).map_err(|e| format!("rename {path}: {e}"))?;
        return Ok(json!({ "renamed": to }));
    }
    if let Some(target) = params["symlink_to"].as_str() {
        let target = std::ffi::CString::new(target).map_err(|_| "NUL in target")?;
        let link = std::ffi::CString::new(path).map_err(|_| "NUL in path")?;
        // SAFETY: both arguments are NUL-terminated strings that outlive
        // the call.
        if unsafe { symlink(target.as_ptr(), link.as_ptr()) } != 0 {
            return Err(format!("symlink {path}: {}", std::io::Error::last_os_error()).into());
        }
        return Ok(json!({ "linked": path }));
    }
    if let Some(content) = params["append"].as_str() {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .and_then(|mut file| file.write_all(content.as_bytes()))
            .map_err(|e| format!("append {path}: {e}"))?;
        return Ok(json!({ "appended": content.len() }));
    }
    if let Some(content) = params["write"].as_str() {
        std::fs::write(path, content).map_err(|e| format!("write {path}: {e}"))?;
        return Ok(json!({ "written": content.len() }));
    }
    let content = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
    Ok(json!({ "content": content }))
}

luge_action::main!(files);
