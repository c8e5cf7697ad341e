//! `luge serve` specifics: many containers, shared modules, destroy, logs,
//! concurrency within and across containers.

use crate::common;

use common::*;
use serde_json::json;

#[test]
fn containers_share_a_module_until_the_last_is_destroyed() {
    let luge = Luge::start("serve", &[]);
    let init = init_body(&wasm("echo"), "main", json!({}));
    luge.init_ok("/a/init", &init);
    luge.init_ok("/b/init", &init);
    let (_, health) = luge.get("/healthz");
    assert_eq!(health["containers"], 2);
    assert_eq!(health["modules"], 1);
    assert_eq!(health["compiles"], 1);

    assert_eq!(luge.post("/a/destroy", &json!({})).0, 200);
    assert_eq!(
        luge.post("/b/run", &json!({"value": {"still": "here"}})).1,
        json!({"still": "here"})
    );
    assert_eq!(luge.get("/healthz").1["modules"], 1);
    assert_eq!(luge.post("/b/destroy", &json!({})).0, 200);
    let (_, health) = luge.get("/healthz");
    assert_eq!(health["containers"], 0);
    assert_eq!(health["modules"], 0);

    // A destroyed container is gone; its id can be initialized again, and
    // the module comes back from the disk cache without compiling.
    assert_eq!(luge.post("/a/run", &json!({})).0, 404);
    luge.init_ok("/a/init", &init);
    assert_eq!(luge.get("/healthz").1["compiles"], 1);
}

#[test]
fn concurrent_runs_on_one_container() {
    let luge = Luge::start("serve", &[]);
    luge.init_ok("/c/init", &init_body(&wasm("echo"), "main", json!({})));
    std::thread::scope(|s| {
        for i in 0..16 {
            let luge = &luge;
            s.spawn(move || {
                for j in 0..5 {
                    let arg = json!({"thread": i, "round": j});
                    assert_eq!(luge.post("/c/run", &json!({"value": arg})), (200, arg));
                }
            });
        }
    });
    let (_, logs) = luge.get("/c/logs");
    let sentinels = logs["logs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["log"] == "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX")
        .count();
    assert_eq!(sentinels, 2 * 80);
    // Logs are drained by reading them.
    assert_eq!(luge.get("/c/logs").1["logs"], json!([]));
}

#[test]
fn logs_of_unknown_container_and_bad_ids() {
    let luge = Luge::start("serve", &[]);
    let (status, body) = luge.get("/nobody/logs");
    assert_eq!(status, 404);
    assert_error(&body, "nobody");
    let (status, body) = luge.post("/bad%20id/init", &json!({}));
    assert_eq!(status, 400, "{body}");
    let (status, body) = luge.get("/no/such/route");
    assert_eq!(status, 404);
    assert!(body["error"].is_string());
}
