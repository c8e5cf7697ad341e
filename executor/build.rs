//! Names the commit `luge --version` was built from: `LUGE_COMMIT`, git's
//! 12-digit hash of HEAD, or `unknown` where the source is not a git
//! checkout (a source archive) or git is missing.

use std::path::Path;
use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|hash| hash.trim().to_owned())
        .filter(|hash| !hash.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=LUGE_COMMIT={commit}");
    // Built again when HEAD moves: HEAD itself (a checkout), and the
    // branch it names (a commit on it).
    let git = Path::new("../.git");
    println!("cargo:rerun-if-changed=../.git/HEAD");
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
        && let Some(branch) = head.trim().strip_prefix("ref: ")
    {
        println!("cargo:rerun-if-changed=../.git/{branch}");
        println!("cargo:rerun-if-changed=../.git/packed-refs");
    }
}
