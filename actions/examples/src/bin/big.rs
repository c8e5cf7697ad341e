//! A larger module (regex with Unicode tables, JSON): the ~1.5 MB module of
//! the precompile and /init benchmarks. Matches `pattern` against `text`.
use luge_action::{Error, Value, json};

fn matches(params: Value) -> Result<Value, Error> {
    let pattern = params["pattern"].as_str().unwrap_or(r"\p{Greek}+");
    let text = params["text"].as_str().unwrap_or("αβγ abc");
    let re = regex::Regex::new(pattern)?;
    let found: Vec<&str> = re.find_iter(text).map(|m| m.as_str()).collect();
    Ok(json!({ "matches": found }))
}

luge_action::main!(matches);
