//! The bodies of OpenWhisk's `/init` and `/run`, and an action's stdout as
//! the runner splits it: a value or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    assert_eq!(
        luge_openwhisk::protocol::parse_init(data),
        luge_openwhisk::protocol::parse_init_general(data)
    );
    let _ = luge_openwhisk::protocol::parse_run(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = luge_openwhisk::protocol::split_result(text);
    }
});
