//! `luge.toml` (routes, chains, state, any `[server]` table) and the Sledge
//! JSON spec, as an operator or a tenant's packaging writes them: a config
//! or an error naming where, never a panic. Parsing reads no files.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let base = Path::new("/srv/luge");
    let _ = luge_host::Config::<toml::Table>::parse(Path::new("/srv/luge/luge.toml"), text, base);
    let _ = luge_host::sledge::parse(Path::new("/srv/luge/spec.json"), text, base);
});
