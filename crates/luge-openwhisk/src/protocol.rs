//! Request bodies and replies of the action-proxy protocol.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

/// Init without code (OpenWhisk's exact message).
pub const MISSING_CODE: &str = "Missing main/no code to execute.";
/// Second init (OpenWhisk's exact message).
pub const INIT_TWICE: &str = "Cannot initialize the action more than once.";
/// A result that is not a JSON object (OpenWhisk's exact message).
pub const NOT_A_DICTIONARY: &str = "The action did not return a dictionary.";
/// Run before a successful init.
pub const NOT_INITIALIZED: &str = "Cannot invoke an uninitialized action.";

/// Status and JSON body of a protocol answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// JSON body.
    pub body: Value,
}

impl Reply {
    /// 200 with `body`.
    pub fn ok(body: Value) -> Self {
        Self { status: 200, body }
    }

    /// `status` with `{"error": message}`.
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            body: json!({ "error": message.into() }),
        }
    }

    /// The error message, if this is an error reply.
    pub fn error_message(&self) -> Option<&str> {
        self.body.get("error").and_then(Value::as_str)
    }
}

/// Statuses used, following OpenWhisk's Go action proxy.
pub mod status {
    /// Malformed request (not JSON, bad base64, bad annotations).
    pub const BAD_REQUEST: u16 = 400;
    /// Init refused (no code, second init, code refused).
    pub const FORBIDDEN: u16 = 403;
    /// Unknown container.
    pub const NOT_FOUND: u16 = 404;
    /// Body over the configured limit.
    pub const PAYLOAD_TOO_LARGE: u16 = 413;
    /// The executor itself failed.
    pub const INTERNAL: u16 = 500;
    /// The action failed (error result, trap, limit, no dictionary).
    pub const ACTION_ERROR: u16 = 502;
    /// At a bound of the executor (containers); retry later or elsewhere.
    pub const UNAVAILABLE: u16 = 503;
}

/// The `value` of an init request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InitRequest {
    /// Action name (`name`).
    pub name: String,
    /// Entry point (`main`).
    pub main: String,
    /// Decoded code bytes.
    pub code: Vec<u8>,
    /// Init-time environment, rendered as OpenWhisk's proxies do.
    pub env: Vec<(String, String)>,
    /// Annotations as sent (object or key/value list).
    pub annotations: Value,
}

/// A Wasm action whose code arrived as text rather than base64.
pub const MANGLED_TEXT: &str = "The action code arrived as text, not base64: `wsk action create` base64-encodes only .zip, .jar and .balx files, so a .wasm given to it is sent as mangled text. Zip the module (`zip hello.zip hello.wasm`, or `luge-precompile --zip`) and create the action from the zip.";

/// Parses an init body. Errors are replies ready to send.
///
/// The code is megabytes of base64 on this path, so its text is read once
/// where it lies in the body ([`code_in_place`]: its end found with SIMD,
/// then decoded with SIMD); only the small fields are parsed into values.
/// Any body that way is in doubt about is parsed the general way
/// ([`parse_init_general`]), which answers alike.
pub fn parse_init(body: &[u8]) -> Result<InitRequest, Reply> {
    init_request(match code_in_place(body) {
        Some(found) => found,
        None => init_fields_decoded(body)?,
    })
}

/// Parses an init body as [`parse_init`] does, but always the general way
/// (the code's text parsed as JSON, then decoded): what `parse_init` must
/// answer alike for every body, as the tests and the fuzzer check.
pub fn parse_init_general(body: &[u8]) -> Result<InitRequest, Reply> {
    init_request(init_fields_decoded(body)?)
}

/// The init request of a body's `value` fields and its decoded code.
fn init_request((value, code): (Map<String, Value>, Vec<u8>)) -> Result<InitRequest, Reply> {
    // A field of the wrong type is the client's mistake, said as such, not
    // silently replaced by a default.
    let text = |key: &str| match value.get(key) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(text)) => Ok(text.as_str()),
        Some(other) => Err(Reply::error(
            status::BAD_REQUEST,
            format!(
                "The init field {key:?} must be a string, not {}.",
                kind(other)
            ),
        )),
    };
    if let Some(binary) = value
        .get("binary")
        .filter(|b| !b.is_null() && !b.is_boolean())
    {
        return Err(Reply::error(
            status::BAD_REQUEST,
            format!(
                "The init field \"binary\" must be a boolean, not {}.",
                kind(binary)
            ),
        ));
    }
    let (name, main) = (text("name")?, text("main")?);
    let env = match value.get("env") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| (k.clone(), luge_core::capabilities::env_value(v)))
            .collect(),
        Some(_) => {
            return Err(Reply::error(
                status::BAD_REQUEST,
                "The init env must be a JSON object.",
            ));
        }
    };
    Ok(InitRequest {
        name: name.to_owned(),
        main: main.to_owned(),
        code,
        env,
        annotations: value.get("annotations").cloned().unwrap_or(Value::Null),
    })
}

/// An init body's fields and its decoded code, read the general way:
/// [`init_fields`], then the code's text decoded as clients write base64.
fn init_fields_decoded(body: &[u8]) -> Result<(Map<String, Value>, Vec<u8>), Reply> {
    let Some((value, code)) = init_fields(body)? else {
        return Err(Reply::error(status::FORBIDDEN, MISSING_CODE));
    };
    let code = match code.as_deref() {
        Some(code) if !code.trim().is_empty() => code,
        _ => return Err(Reply::error(status::FORBIDDEN, MISSING_CODE)),
    };
    let decoded = luge_registry::code::decode_base64(code).map_err(|e| {
        // `wsk action create` base64-encodes only .zip, .jar and .balx
        // files: a .wasm given to it arrives as (mangled) text.
        let as_text = code.starts_with("\0asm")
            || value.get("binary").and_then(Value::as_bool) == Some(false);
        let message = if as_text {
            MANGLED_TEXT.to_owned()
        } else {
            format!("The action code is not valid base64 ({e}); Wasm actions are sent as base64 of a .wasm, a zip or a Luge artifact.")
        };
        Reply::error(status::BAD_REQUEST, message)
    })?;
    Ok((value, decoded))
}

/// What kind of JSON value `value` is, for messages (never the value
/// itself, which may be large).
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The shape of a well-formed init body. `flatten` makes each a map only
/// (a derived struct alone would also take an array, field by field) and
/// keeps the keys it does not name.
#[derive(serde::Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    value: Fields<'a>,
    #[serde(flatten)]
    _others: Map<String, Value>,
}

/// The fields of a well-formed init body's `value`.
#[derive(serde::Deserialize)]
struct Fields<'a> {
    #[serde(flatten)]
    _others: Map<String, Value>,
    /// Borrowed from the body: a string with escapes is not one, and is
    /// left to the general parse.
    #[serde(borrow)]
    code: Option<&'a str>,
    name: Option<Value>,
    main: Option<Value>,
    binary: Option<Value>,
    env: Option<Value>,
    annotations: Option<Value>,
}

impl Fields<'_> {
    /// The named fields but the code, by name.
    fn into_map(self) -> Map<String, Value> {
        [
            ("name", self.name),
            ("main", self.main),
            ("binary", self.binary),
            ("env", self.env),
            ("annotations", self.annotations),
        ]
        .into_iter()
        .filter_map(|(key, field)| Some((key.to_owned(), field?)))
        .collect()
    }
}

/// An init body's fields and its decoded code, the code's text read once
/// (by a SIMD search for its end, then by the decoder); `None` wherever
/// this is in any doubt, and the body is then read by [`init_fields`].
///
/// OpenWhisk sends an action's code as one JSON string of standard base64,
/// megabytes of it for a large artifact. A JSON parser reads such a string
/// byte by byte for its end and its escapes (about 0.6 ms for 3.7 MB here,
/// then a copy); here its end is found with `memchr2` for `"` or `\`, the
/// rest of the body is parsed with that string emptied, and the text is
/// decoded where it lies by the strict decoder (padded, nothing but the 65
/// characters of base64).
///
/// Why the result is the body's own: the emptied body must parse as a
/// well-formed init body whose `value.code` is the very string emptied
/// (borrowed at that offset: no other string, and no escaped one, can be
/// there), and the strict decoder admits no quote, backslash or control
/// character, so putting the text back gives the same JSON with the same
/// fields, the code aside. A key `"code"` elsewhere (inside another field)
/// fails that test and the next is tried, a bounded number of times.
fn code_in_place(body: &[u8]) -> Option<(Map<String, Value>, Vec<u8>)> {
    /// Where a `"code"` inside another field precedes the code's own, so
    /// many are tried before the general parse is left to find it (each
    /// try copies the rest of the body).
    const CANDIDATES: usize = 4;
    let json_space = |text: &[u8]| {
        text.iter()
            .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .count()
    };
    const KEY: &[u8] = b"\"code\"";
    for key in memchr::memmem::find_iter(body, KEY).take(CANDIDATES) {
        let colon = key + KEY.len() + json_space(&body[key + KEY.len()..]);
        if body.get(colon) != Some(&b':') {
            continue;
        }
        let quote = colon + 1 + json_space(&body[colon + 1..]);
        if body.get(quote) != Some(&b'"') {
            continue;
        }
        let start = quote + 1;
        // No end at all: not JSON, which the general parse says.
        let end = start + memchr::memchr2(b'"', b'\\', &body[start..])?;
        if body[end] != b'"' || end == start {
            // Escaped, or empty (no code): the general parse's.
            continue;
        }
        let mut emptied = Vec::with_capacity(body.len() - (end - start));
        emptied.extend_from_slice(&body[..start]);
        emptied.extend_from_slice(&body[end..]);
        let value = match serde_json::from_slice::<Body>(&emptied) {
            Ok(Body { value, .. }) => value,
            // Not a well-formed init body: the general parse's too.
            Err(_) => return None,
        };
        if value.code.map(str::as_ptr) != Some(emptied[start..].as_ptr()) {
            continue;
        }
        let code = luge_registry::code::decode_padded_base64(&body[start..end])?;
        return Some((value.into_map(), code));
    }
    None
}

/// An init body's `value` as fields, its `code` apart (`None` where there
/// is no `value` object: OpenWhisk's "missing code").
///
/// Well-formed bodies take one pass that leaves the code where it lies
/// when it has no escapes; anything else (not an object, a repeated key,
/// a field of an unexpected type, an escaped code) is parsed again as a
/// tree, which decides the reply as the protocol says.
#[allow(clippy::type_complexity)]
fn init_fields(body: &[u8]) -> Result<Option<(Map<String, Value>, Option<Cow<'_, str>>)>, Reply> {
    if let Ok(Body { value, .. }) = serde_json::from_slice(body) {
        let code = value.code.map(Cow::Borrowed);
        return Ok(Some((value.into_map(), code)));
    }
    let root: Value = serde_json::from_slice(body).map_err(|e| {
        Reply::error(
            status::BAD_REQUEST,
            format!("The init body is not valid JSON: {e}"),
        )
    })?;
    let Value::Object(mut root) = root else {
        return Ok(None);
    };
    let Some(Value::Object(mut fields)) = root.remove("value") else {
        return Ok(None);
    };
    let code = match fields.remove("code") {
        Some(Value::String(code)) => Some(Cow::Owned(code)),
        _ => None,
    };
    Ok(Some((fields, code)))
}

/// A parsed run body.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The parameters, serialized: the action's stdin.
    pub params: Vec<u8>,
    /// `__OW_*` variables from the other top-level keys.
    pub context: Vec<(String, String)>,
    /// `deadline` in milliseconds since the Unix epoch, when given.
    pub deadline_ms: Option<u64>,
}

/// Parses a run body: `value` becomes stdin, every other key `__OW_<KEY>`.
pub fn parse_run(body: &[u8]) -> Result<RunRequest, Reply> {
    let root: Value = serde_json::from_slice(body).map_err(|e| {
        Reply::error(
            status::BAD_REQUEST,
            format!("The run body is not valid JSON: {e}"),
        )
    })?;
    let Value::Object(root) = root else {
        return Err(Reply::error(
            status::BAD_REQUEST,
            "The run body must be a JSON object.",
        ));
    };
    let mut params = Value::Object(Map::new());
    let mut context = Vec::with_capacity(root.len());
    let mut deadline_ms = None;
    for (key, value) in root {
        if key == "value" {
            params = value;
            continue;
        }
        if key == "deadline" {
            deadline_ms = match &value {
                Value::Number(n) => n.as_u64(),
                Value::String(s) => s.parse().ok(),
                _ => None,
            };
        }
        let rendered = luge_core::capabilities::env_value(&value);
        context.push((
            format!("{}{}", crate::activation::PREFIX, key.to_uppercase()),
            rendered,
        ));
    }
    Ok(RunRequest {
        params: serde_json::to_vec(&params).unwrap_or_else(|_| b"{}".to_vec()),
        context,
        deadline_ms,
    })
}

/// Splits stdout into the result (the last line that is a JSON object) and
/// log lines (every other line).
pub fn split_result(stdout: &str) -> (Option<Map<String, Value>>, Vec<&str>) {
    let lines: Vec<&str> = stdout.lines().collect();
    for (i, line) in lines.iter().enumerate().rev() {
        let trimmed = line.trim();
        if !trimmed.starts_with('{') {
            continue;
        }
        if let Ok(Value::Object(result)) = serde_json::from_str::<Value>(trimmed) {
            let logs = lines
                .iter()
                .enumerate()
                .filter(|(j, l)| *j != i && !l.is_empty())
                .map(|(_, l)| *l)
                .collect();
            return (Some(result), logs);
        }
    }
    (None, lines.into_iter().filter(|l| !l.is_empty()).collect())
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    #[test]
    fn wrong_typed_fields_are_bad_requests() {
        let code = base64::engine::general_purpose::STANDARD.encode(b"\0asm\x01\0\0\0");
        for (field, value) in [
            ("main", json!(7)),
            ("name", json!(["a"])),
            ("binary", json!("yes")),
        ] {
            let mut init = json!({"value": {"code": code, "main": "main"}});
            init["value"][field] = value;
            let reply = parse_init(init.to_string().as_bytes()).unwrap_err();
            assert_eq!(reply.status, status::BAD_REQUEST, "{field}");
            assert!(reply.error_message().unwrap().contains(field), "{reply:?}");
        }
        let ok = json!({"value": {"code": code, "main": null, "binary": true}});
        assert!(parse_init(ok.to_string().as_bytes()).is_ok());
    }

    #[test]
    fn init_errors_match_openwhisk() {
        assert_eq!(
            parse_init(b"{}").unwrap_err().error_message(),
            Some(MISSING_CODE)
        );
        let empty = br#"{"value":{"code":"","main":""}}"#;
        assert_eq!(
            parse_init(empty).unwrap_err().error_message(),
            Some(MISSING_CODE)
        );
        assert_eq!(parse_init(b"{not json").unwrap_err().status, 400);
        let bad64 = br#"{"value":{"code":"%%%not base64","binary":true}}"#;
        let err = parse_init(bad64).unwrap_err();
        assert!(err.error_message().unwrap().contains("base64"), "{err:?}");
    }

    #[test]
    fn code_is_read_in_place_or_unescaped_and_decoded_like_before() {
        // Bodies that are not an object, or whose value is not one, or
        // whose code is not a string, have no code (OpenWhisk's 403).
        for body in [
            &br#"[{"code":"AGFzbQ=="}]"#[..],
            br#""text""#,
            br#"{"value":[1]}"#,
            br#"{"value":["AGFzbQ=="]}"#,
            br#"{"value":{"code":["AGFzbQ=="]}}"#,
            br#"{"value":{"code":7}}"#,
            br#"{"value":{"code":null}}"#,
            br#"{"value":{"code":" \n "}}"#,
        ] {
            let reply = parse_init(body).unwrap_err();
            assert_eq!(reply.error_message(), Some(MISSING_CODE), "{body:?}");
            assert_eq!(reply.status, status::FORBIDDEN);
        }
        // An escaped string (`\/` is how some encoders write `/`) is
        // unescaped before it is decoded; the last of a repeated key wins.
        let escaped = br#"{"value":{"code":"x","code":"\/\/\/\/","main":"m"}}"#;
        let init = parse_init(escaped).unwrap();
        assert_eq!(init.code, [0xff, 0xff, 0xff]);
        assert_eq!(init.main, "m");
    }

    #[test]
    fn the_code_is_found_in_place_only_where_it_is_the_codes_own() {
        let code = base64::engine::general_purpose::STANDARD.encode(b"\0asm\x01\0\0\0 and more");
        let read = |body: &str| {
            let general = init_fields_decoded(body.as_bytes());
            (code_in_place(body.as_bytes()), general)
        };
        // What OpenWhisk sends: found in place, the same as the general way.
        for body in [
            format!(
                r#"{{"value":{{"name":"a","main":"m","code":"{code}","binary":true,"env":{{}}}}}}"#
            ),
            format!("{{ \"value\" : {{ \"code\" \t:\r\n \"{code}\" , \"main\" : \"m\" }} }}"),
            // A `"code"` in another field first: the next is the code.
            format!(
                r#"{{"value":{{"annotations":{{"code":"QUJD"}},"env":{{"x":"\"code\":\"QUJD\""}},"code":"{code}"}}}}"#
            ),
            format!(r#"{{"activation":{{"code":"QUJD"}},"value":{{"code":"{code}"}}}}"#),
        ] {
            let (fast, general) = read(&body);
            let (fields, decoded) = fast.unwrap_or_else(|| panic!("not in place: {body}"));
            let (general_fields, general_decoded) = general.unwrap();
            assert_eq!(decoded, b"\0asm\x01\0\0\0 and more", "{body}");
            assert_eq!(
                (&fields, &decoded),
                (&general_fields, &general_decoded),
                "{body}"
            );
            let body = body.as_bytes();
            assert_eq!(parse_init(body), parse_init_general(body));
        }
        // Anything else is the general parse's, which decides the reply:
        // a repeated key (the last wins), an escaped or empty code, code
        // of another type or outside `value`, unpadded or wrapped base64,
        // invalid JSON around or inside the code, a `"code"` that is not
        // a key, or only one that is no field of `value`.
        let unpadded = code.trim_end_matches('=');
        for body in [
            format!(r#"{{"value":{{"code":"{code}","code":"QUJD"}}}}"#),
            format!(r#"{{"value":{{"code":"QUJD","code":"{code}"}}}}"#),
            format!(r#"{{"value":{{"code":"\/\/\/\/{code}"}}}}"#),
            r#"{"value":{"code":""}}"#.to_owned(),
            r#"{"value":{"code":["QUJD"]}}"#.to_owned(),
            format!(r#"{{"code":"{code}","value":{{}}}}"#),
            format!(r#"{{"value":{{"code":"{unpadded}"}}}}"#),
            format!(r#"{{"value":{{"code":"{}\n{}"}}}}"#, &code[..4], &code[4..]),
            format!(r#"{{"value":{{"code":"{code}"}}"#),
            format!(r#"{{"value":{{"code":"{code}", }}}}"#),
            format!(r#"{{"value":{{"main":"\"code\":\"{code}\""}}}}"#),
            format!(r#"{{"value":{{"env":{{"code":"{code}"}}}}}}"#),
            format!(r#"[{{"code":"{code}"}}]"#),
        ] {
            assert!(code_in_place(body.as_bytes()).is_none(), "in place: {body}");
            let body = body.as_bytes();
            assert_eq!(parse_init(body), parse_init_general(body));
        }
        // The repeated key's last value, as before.
        let body = format!(r#"{{"value":{{"code":"{code}","code":"QUJD"}}}}"#);
        assert_eq!(parse_init(body.as_bytes()).unwrap().code, b"ABC");
        // Candidates are bounded: past four `"code"` keys elsewhere, the
        // general parse finds the code, as it does in any case.
        let decoys = r#""code":"QUJD","#.repeat(5);
        let body = format!(r#"{{"value":{{"annotations":{{{decoys}"x":1}},"code":"{code}"}}}}"#);
        let (fast, general) = read(&body);
        assert!(fast.is_none());
        assert_eq!(general.unwrap().1, b"\0asm\x01\0\0\0 and more");
    }

    #[test]
    fn a_wasm_sent_as_text_is_named_as_such() {
        // What `wsk action create hello hello.wasm` sends: the file as text.
        let mangled =
            json!({"value": {"code": "\u{0}asm\u{1}\u{0}\u{0}\u{0}\u{fffd}", "binary": false}});
        let err = parse_init(mangled.to_string().as_bytes()).unwrap_err();
        assert_eq!(err.status, 400);
        assert_eq!(err.error_message(), Some(MANGLED_TEXT));
    }

    #[test]
    fn init_env_is_rendered_like_openwhisk() {
        let body = br#"{"value":{"code":"AGFzbQ==","env":{"ARRAY":["a","b"],"OBJECT":{"a":"A"},"STRING":"xyz","NUMBER":3,"BOOL":true,"NULL":null}}}"#;
        let init = parse_init(body).unwrap();
        let env: std::collections::HashMap<_, _> = init.env.into_iter().collect();
        assert_eq!(env["ARRAY"], r#"["a","b"]"#);
        assert_eq!(env["OBJECT"], r#"{"a":"A"}"#);
        assert_eq!(env["STRING"], "xyz");
        assert_eq!(env["NUMBER"], "3");
        assert_eq!(env["BOOL"], "true");
        assert_eq!(env["NULL"], "");
        assert_eq!(init.code, b"\0asm");
        let wrapped = br#"{"value":{"code":"AGFz\nbQ=="}}"#;
        assert_eq!(parse_init(wrapped).unwrap().code, b"\0asm");
    }

    #[test]
    fn run_context_becomes_ow_variables() {
        let run = parse_run(
            br#"{"value":{"x":1},"api_key":"abc","deadline":"123","activation_id":"iii"}"#,
        )
        .unwrap();
        assert_eq!(run.params, br#"{"x":1}"#);
        assert_eq!(run.deadline_ms, Some(123));
        assert!(run.context.contains(&("__OW_API_KEY".into(), "abc".into())));
        assert!(
            run.context
                .contains(&("__OW_ACTIVATION_ID".into(), "iii".into()))
        );
        assert_eq!(parse_run(b"[1]").unwrap_err().status, 400);
    }

    #[test]
    fn result_is_last_json_object_line() {
        let (result, logs) = split_result("hello stdout\n{\"a\":1}\n[2]\n");
        assert_eq!(result.unwrap()["a"], 1);
        assert_eq!(logs, vec!["hello stdout", "[2]"]);
        let (none, logs) = split_result("just text\n[\"x\"]\n");
        assert!(none.is_none());
        assert_eq!(logs.len(), 2);
    }
}
