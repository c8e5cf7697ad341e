//! A small social network as a call graph (after DeathStarBench's, which
//! Pyrosome runs): one module, one service per route, chosen by `argv[1]`
//! (`args = ["compose-post"]` in the route).
//!
//! `compose-post` fans out to `text`, `user`, `media` and `unique-id` at
//! once; `text` itself calls `url-shorten` and `user-mention`. With their
//! answers it stores the post (`post-storage`) and updates the timelines
//! (`home-timeline`), again in parallel, and answers with the post.
use luge_action::{Error, Value, call, json};

fn service(params: Value) -> Result<Value, Error> {
    let name = std::env::args().nth(1).unwrap_or_default();
    match name.as_str() {
        "compose-post" => compose_post(params),
        "text" => {
            let text = params["text"].as_str().unwrap_or_default();
            let [urls, mentions] = both(
                ("url-shorten", json!({ "text": text })),
                ("user-mention", json!({ "text": text })),
            )?;
            Ok(json!({ "text": text, "urls": urls["urls"], "mentions": mentions["mentions"] }))
        }
        "url-shorten" => {
            let urls: Vec<Value> = words(&params, |w| w.starts_with("http"))
                .iter()
                .map(|u| json!({ "long": u, "short": format!("s/{:08x}", hash(u)) }))
                .collect();
            Ok(json!({ "urls": urls }))
        }
        "user-mention" => Ok(json!({
            "mentions": words(&params, |w| w.starts_with('@') && w.len() > 1)
        })),
        "user" => Ok(json!({
            "user_id": hash(params["user"].as_str().unwrap_or_default()) % 100_000
        })),
        "media" => Ok(json!({ "media": params["media"].as_array().map_or(0, Vec::len) })),
        "unique-id" => Ok(json!({ "post_id": hash(&params.to_string()) })),
        "post-storage" => Ok(json!({ "stored": params["post_id"] })),
        "home-timeline" => Ok(json!({ "followers_updated": 3 })),
        other => Err(format!("unknown service {other:?}").into()),
    }
}

fn compose_post(params: Value) -> Result<Value, Error> {
    let started = [
        ("text", json!({ "text": params["text"] })),
        ("user", json!({ "user": params["user"] })),
        ("media", json!({ "media": params["media"] })),
        ("unique-id", params.clone()),
    ]
    .map(|(name, input)| call::start(name, &input));
    let [text, user, media, id] = started.map(|c| c.and_then(call::Call::json));
    let post = json!({
        "post_id": id?["post_id"],
        "user_id": user?["user_id"],
        "text": text?,
        "media": media?["media"],
    });
    let [stored, timeline] = both(
        ("post-storage", post.clone()),
        ("home-timeline", post.clone()),
    )?;
    Ok(json!({ "post": post, "stored": stored["stored"], "timeline": timeline }))
}

/// Two calls at once; both results, or the first error.
fn both(a: (&str, Value), b: (&str, Value)) -> Result<[Value; 2], Error> {
    let (a, b) = (call::start(a.0, &a.1), call::start(b.0, &b.1));
    Ok([a?.json()?, b?.json()?])
}

fn words(params: &Value, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let text = params["text"].as_str().unwrap_or_default();
    text.split_whitespace()
        .filter(|w| keep(w))
        .map(str::to_owned)
        .collect()
}

/// FNV-1a: a stable id without a dependency.
fn hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

luge_action::main!(service);
