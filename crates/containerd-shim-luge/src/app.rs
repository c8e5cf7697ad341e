//! Which app a container holds, and the `luge serve` arguments that serve
//! it. Pure: given a root directory, so it is tested without a container.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Where Spin's shim looks for an app's manifest when the image is files
/// (containerd-shim-spin's `SPIN_MANIFEST_FILE_PATH`).
pub const SPIN_MANIFEST: &str = "spin.toml";
/// Where Spin's shim looks for the runtime config
/// (containerd-shim-spin's `RUNTIME_CONFIG_PATH`).
pub const RUNTIME_CONFIG: &str = "runtime-config.toml";
/// A Luge app's config at the image's root.
pub const LUGE_CONFIG: &str = "luge.toml";
/// The variable that moves the HTTP listener (Spin's shim's name).
pub const LISTEN_ENV: &str = "SPIN_HTTP_LISTEN_ADDR";
/// Where the app listens by default: every address of the pod, port 80,
/// as containerd-shim-spin (a Service targets the pod's address).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:80";
/// The app's shared state and SQLite databases, inside the container's
/// writable root (gone with the container, as the pod's own files are).
pub const STATE_DIR: &str = "luge-state";

/// An app found in a container's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum App {
    /// A Spin app: its manifest, and the runtime config beside it, if any.
    Spin {
        /// `spin.toml`.
        manifest: PathBuf,
        /// `runtime-config.toml` at the root, if the image has one.
        runtime_config: Option<PathBuf>,
    },
    /// A Luge app: its `luge.toml`.
    Luge {
        /// `luge.toml`.
        config: PathBuf,
    },
}

/// Why a container cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AppError {
    /// Neither manifest is where the image's entry point or root says.
    #[error(
        "no runnable app in the image: no {SPIN_MANIFEST} or {LUGE_CONFIG} at its root \
         (nor named by its entrypoint)"
    )]
    NoApp,
    /// The entry point names a file that is neither manifest.
    #[error("the image's entrypoint {0} is neither a spin.toml nor a luge.toml")]
    UnknownEntrypoint(String),
    /// `SPIN_HTTP_LISTEN_ADDR` is not an address.
    #[error("{LISTEN_ENV}={0} is not an address (expected IP:PORT)")]
    BadListen(String),
}

/// The app under `root`: the file the entry point names (`/spin.toml`,
/// `/app/luge.toml`) if it names one, else `spin.toml` or `luge.toml` at
/// the root (a Spin app first, as Spin's shim).
pub fn find(root: &Path, entrypoint: Option<&Path>) -> Result<App, AppError> {
    let runtime_config = Some(root.join(RUNTIME_CONFIG)).filter(|p| p.is_file());
    if let Some(entry) = entrypoint.filter(|e| e.extension().is_some_and(|x| x == "toml")) {
        let path = root.join(entry.strip_prefix("/").unwrap_or(entry));
        if !path.is_file() {
            return Err(AppError::NoApp);
        }
        return match entry.file_name().and_then(|n| n.to_str()) {
            Some(SPIN_MANIFEST) => Ok(App::Spin {
                manifest: path,
                runtime_config,
            }),
            Some(LUGE_CONFIG) => Ok(App::Luge { config: path }),
            _ => Err(AppError::UnknownEntrypoint(entry.display().to_string())),
        };
    }
    let spin = root.join(SPIN_MANIFEST);
    if spin.is_file() {
        return Ok(App::Spin {
            manifest: spin,
            runtime_config,
        });
    }
    let luge = root.join(LUGE_CONFIG);
    if luge.is_file() {
        return Ok(App::Luge { config: luge });
    }
    Err(AppError::NoApp)
}

/// Where the app listens: `SPIN_HTTP_LISTEN_ADDR` from the container's
/// environment (`NAME=VALUE` entries), else [`DEFAULT_LISTEN`].
pub fn listen(envs: &[String]) -> Result<SocketAddr, AppError> {
    let value = envs
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix(LISTEN_ENV)?.strip_prefix('='))
        .unwrap_or(DEFAULT_LISTEN);
    value
        .parse()
        .map_err(|_| AppError::BadListen(value.to_owned()))
}

/// `luge serve`'s arguments for `app` (after the program name); `fs_root`
/// is where the app's file grants lie (`--fs-root`), if it has any.
pub fn serve_args(
    app: &App,
    root: &Path,
    listen: SocketAddr,
    fs_root: Option<&Path>,
) -> Vec<String> {
    let mut args = vec!["serve".to_owned()];
    match app {
        App::Spin {
            manifest,
            runtime_config,
        } => {
            args.push("--spin".to_owned());
            args.push(manifest.display().to_string());
            if let Some(rc) = runtime_config {
                args.push("--runtime-config-file".to_owned());
                args.push(rc.display().to_string());
            }
        }
        App::Luge { config } => {
            args.push("--config".to_owned());
            args.push(config.display().to_string());
        }
    }
    args.push("--listen".to_owned());
    args.push(listen.to_string());
    args.push("--state-dir".to_owned());
    args.push(root.join(STATE_DIR).display().to_string());
    // Compiled modules beside the state, in the container's own root.
    args.push("--cache-dir".to_owned());
    args.push(root.join(STATE_DIR).join("cache").display().to_string());
    if let Some(fs_root) = fs_root {
        args.push("--fs-root".to_owned());
        args.push(fs_root.display().to_string());
    }
    args
}

/// The variable naming the components a pod serves of its Spin app,
/// comma-separated (containerd-shim-spin's; spin-operator sets it from a
/// SpinApp's `components`).
pub const RETAIN_ENV: &str = "SPIN_COMPONENTS_TO_RETAIN";

/// `luge serve`'s `--component-id` flags for the components
/// `SPIN_COMPONENTS_TO_RETAIN` in the container's environment names (none
/// when it is unset or names none, or when the app is not a Spin app:
/// every component is served).
pub fn retain_args(app: &App, envs: &[String]) -> Vec<String> {
    let Some(list) = envs
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix(RETAIN_ENV)?.strip_prefix('='))
    else {
        return Vec::new();
    };
    if !matches!(app, App::Spin { .. }) {
        return Vec::new();
    }
    list.split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .flat_map(|id| ["--component-id".to_owned(), id.to_owned()])
        .collect()
}

/// The container's memory limit, bytes, as its cgroup says (v2's
/// `memory.max`, else v1's `memory.limit_in_bytes`, where libcontainer
/// mounts the container's own cgroup); `None` without one.
pub fn memory_limit(cgroup_root: &Path) -> Option<u64> {
    [
        cgroup_root.join("memory.max"),
        cgroup_root.join("memory/memory.limit_in_bytes"),
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok())
    .and_then(|text| text.trim().parse::<u64>().ok())
    // v1 says "no limit" with a number near 2^63.
    .filter(|&bytes| bytes < 1 << 60)
}

/// `luge serve`'s memory flags for a pod limited to `limit` bytes: a
/// sandbox's default limit a quarter of it and its largest half (both no
/// more than Luge's defaults, 256 and 512 MiB), the memory Wasmtime may
/// keep resident for reuse an eighth (default 256 MiB), so one function's
/// sandboxes cannot take the whole pod and its cgroup's OOM killer stays
/// the last word, not the first. No limit: Luge's defaults.
pub fn memory_args(limit: Option<u64>) -> Vec<String> {
    let Some(limit) = limit else {
        return Vec::new();
    };
    let mib = (limit >> 20).max(8);
    [
        ("--memory-mb", (mib / 4).min(256)),
        ("--max-memory-mb", (mib / 2).min(512)),
        ("--resident-budget-mb", (mib / 8).min(256)),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_owned(), value.max(1).to_string()])
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_app_by_entrypoint_then_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(find(root, None), Err(AppError::NoApp));
        std::fs::write(root.join("luge.toml"), "").unwrap();
        assert_eq!(
            find(root, None),
            Ok(App::Luge {
                config: root.join("luge.toml")
            })
        );
        std::fs::write(root.join("spin.toml"), "").unwrap();
        std::fs::write(root.join("runtime-config.toml"), "").unwrap();
        let spin = App::Spin {
            manifest: root.join("spin.toml"),
            runtime_config: Some(root.join("runtime-config.toml")),
        };
        assert_eq!(find(root, None), Ok(spin.clone()));
        // The entry point wins, and names only what exists.
        assert_eq!(
            find(root, Some(Path::new("/luge.toml"))),
            Ok(App::Luge {
                config: root.join("luge.toml")
            })
        );
        assert_eq!(find(root, Some(Path::new("/spin.toml"))), Ok(spin));
        assert_eq!(
            find(root, Some(Path::new("/app/luge.toml"))),
            Err(AppError::NoApp)
        );
        std::fs::write(root.join("other.toml"), "").unwrap();
        assert_eq!(
            find(root, Some(Path::new("/other.toml"))),
            Err(AppError::UnknownEntrypoint("/other.toml".into()))
        );
        // An entry point that is no manifest (a module, `/`) falls back.
        assert!(find(root, Some(Path::new("/app.wasm"))).is_ok());
    }

    #[test]
    fn listens_where_spin_would() {
        assert_eq!(listen(&[]).unwrap().to_string(), "0.0.0.0:80");
        let envs = [
            "A=1".to_owned(),
            "SPIN_HTTP_LISTEN_ADDR=127.0.0.1:3000".to_owned(),
        ];
        assert_eq!(listen(&envs).unwrap().to_string(), "127.0.0.1:3000");
        assert_eq!(
            listen(&["SPIN_HTTP_LISTEN_ADDR=nowhere".to_owned()]),
            Err(AppError::BadListen("nowhere".into()))
        );
    }

    #[test]
    fn a_pods_memory_limit_bounds_its_sandboxes() {
        assert!(memory_args(None).is_empty());
        assert_eq!(
            memory_args(Some(256 << 20)),
            [
                "--memory-mb",
                "64",
                "--max-memory-mb",
                "128",
                "--resident-budget-mb",
                "32"
            ]
        );
        // A big pod keeps Luge's defaults.
        assert_eq!(
            memory_args(Some(64 << 30))[1..]
                .iter()
                .step_by(2)
                .collect::<Vec<_>>(),
            ["256", "512", "256"]
        );
        // Each is a flag `luge serve` takes, in a valid combination.
        let mut argv = vec!["luge".to_owned(), "serve".to_owned()];
        argv.extend(memory_args(Some(100 << 20)));
        assert!(<luge_executor::cli::Cli as clap::Parser>::try_parse_from(argv).is_ok());

        let dir = tempfile::tempdir().unwrap();
        assert_eq!(memory_limit(dir.path()), None);
        std::fs::create_dir(dir.path().join("memory")).unwrap();
        let v1 = dir.path().join("memory/memory.limit_in_bytes");
        std::fs::write(&v1, "9223372036854771712\n").unwrap();
        assert_eq!(memory_limit(dir.path()), None, "v1's no limit");
        std::fs::write(&v1, "268435456\n").unwrap();
        assert_eq!(memory_limit(dir.path()), Some(256 << 20));
        std::fs::write(dir.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(memory_limit(dir.path()), None, "v2's no limit");
    }

    /// SpinKube's `components` reach `luge serve` as `--component-id`s,
    /// for a Spin app only.
    #[test]
    fn the_components_to_retain_are_component_ids() {
        let spin = App::Spin {
            manifest: "/spin.toml".into(),
            runtime_config: None,
        };
        let envs = |value: &str| vec!["A=1".to_owned(), format!("{RETAIN_ENV}={value}")];
        assert_eq!(
            retain_args(&spin, &envs("app, backend,")),
            ["--component-id", "app", "--component-id", "backend"]
        );
        assert!(retain_args(&spin, &envs("")).is_empty());
        assert!(retain_args(&spin, &["A=1".to_owned()]).is_empty());
        let luge = App::Luge {
            config: "/luge.toml".into(),
        };
        assert!(retain_args(&luge, &envs("app")).is_empty());
        let mut argv = vec!["luge".to_owned()];
        argv.extend(serve_args(
            &spin,
            Path::new("/"),
            "0.0.0.0:80".parse().unwrap(),
            None,
        ));
        argv.extend(retain_args(&spin, &envs("app")));
        assert!(<luge_executor::cli::Cli as clap::Parser>::try_parse_from(argv).is_ok());
    }

    #[test]
    fn serve_args_are_luge_serve_flags() {
        let root = Path::new("/");
        let app = App::Spin {
            manifest: "/spin.toml".into(),
            runtime_config: None,
        };
        let args = serve_args(&app, root, "0.0.0.0:80".parse().unwrap(), None);
        assert_eq!(
            args,
            [
                "serve",
                "--spin",
                "/spin.toml",
                "--listen",
                "0.0.0.0:80",
                "--state-dir",
                "/luge-state",
                "--cache-dir",
                "/luge-state/cache"
            ]
        );
        // Each is a flag `luge serve` takes.
        let mut argv = vec!["luge".to_owned()];
        argv.extend(args);
        assert!(<luge_executor::cli::Cli as clap::Parser>::try_parse_from(argv).is_ok());
    }
}
