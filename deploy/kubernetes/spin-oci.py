#!/usr/bin/env python3
"""Writes a Spin app as `spin registry push` lays it out, as an OCI image
tarball `ctr images import` takes (no registry is reachable here, and no
`spin` CLI is needed):

    spin-oci.py OUT.tar NAME path/to/spin.toml [--set-default VAR=VALUE]...
                [--build-id ID]

The image is the app as layers, no file system: the locked app (Spin's
`spin.lock` JSON) as a layer `application/vnd.fermyon.spin.application.v1+config`,
each component's Wasm as `application/vnd.wasm.content.layer.v1+wasm`
(one layer per distinct module), each file as
`application/vnd.wasm.content.layer.v1+data` (under 128 bytes inline in
the lock file, as Spin does), and an image config of architecture
`wasm`, os `wasip1`, labelled with the locked app's digest. This is the
layout containerd-shim-spin reads; it is locked from the manifest here
for the subset of spin.toml this repository's apps use (variables,
triggers, components with grants, variables, environment and files).
`--set-default` changes a variable's default (an app's next version);
`--build-id` labels the image config and adds a custom section naming it
to each component (Wasm that runs the same, in layers no node has seen):
a new image, compiled afresh by the shim like any new code.
"""
import argparse
import base64
import json
import os
import tomllib

from oci_layout import digest_of, write_image

LOCKED = "application/vnd.fermyon.spin.application.v1+config"
WASM = "application/vnd.wasm.content.layer.v1+wasm"
DATA = "application/vnd.wasm.content.layer.v1+data"
INLINE_MAX = 128


def leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def with_custom_section(wasm: bytes, name: str, payload: bytes) -> bytes:
    """`wasm` with a custom section (id 0) appended: valid in a module and
    in a component, and ignored when it runs."""
    body = leb128(len(name)) + name.encode() + payload
    return wasm + b"\x00" + leb128(len(body)) + body


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("name")
    p.add_argument("manifest")
    p.add_argument("--set-default", action="append", default=[])
    p.add_argument("--build-id")
    args = p.parse_args()
    base = os.path.dirname(os.path.abspath(args.manifest))
    with open(args.manifest, "rb") as f:
        manifest = tomllib.load(f)

    layers = {}  # digest -> (media type, bytes), in push order

    def content(data: bytes, media_type: str) -> dict:
        if media_type == DATA and len(data) < INLINE_MAX:
            return {"inline": base64.b64encode(data).decode()}
        digest = digest_of(data)
        layers.setdefault(digest, (media_type, data))
        return {"digest": digest}

    application = manifest.get("application", {})
    metadata = {k: application[k] for k in ("name", "version", "description", "authors")
                if k in application}
    if "trigger" in application:
        metadata["triggers"] = application["trigger"]

    defaults = dict(item.split("=", 1) for item in args.set_default)
    variables = {}
    for name, spec in manifest.get("variables", {}).items():
        variable = {}
        if name in defaults:
            variable["default"] = defaults.pop(name)
        elif "default" in spec:
            variable["default"] = spec["default"]
        if spec.get("secret"):
            variable["secret"] = True
        variables[name] = variable
    if defaults:
        raise SystemExit(f"no such variables: {sorted(defaults)}")

    triggers = []
    for kind, entries in manifest.get("trigger", {}).items():
        for index, entry in enumerate(entries):
            triggers.append({
                "id": f"trigger--{kind}-{index}",
                "trigger_type": kind,
                "trigger_config": entry,
            })

    components = []
    for cid, spec in manifest.get("component", {}).items():
        with open(os.path.join(base, spec["source"]), "rb") as f:
            wasm = f.read()
        if args.build_id:
            wasm = with_custom_section(wasm, "luge-build-id", args.build_id.encode())
        component_metadata = {}
        for key, locked_key in (("description", "description"),
                                ("allowed_outbound_hosts", "allowed_outbound_hosts"),
                                ("key_value_stores", "key_value_stores"),
                                ("sqlite_databases", "databases")):
            if key in spec:
                component_metadata[locked_key] = spec[key]
        files = []
        for entry in spec.get("files", []):
            if isinstance(entry, str):
                source, destination = entry, "/" + entry
            else:
                source, destination = entry["source"], entry["destination"]
            root = os.path.join(base, source)
            walked = [(root, "")] if os.path.isfile(root) else [
                (os.path.join(d, n), os.path.relpath(os.path.join(d, n), root))
                for d, _, names in sorted(os.walk(root)) for n in sorted(names)]
            for path, relative in walked:
                with open(path, "rb") as f:
                    data = f.read()
                target = destination if not relative else os.path.join(destination, relative)
                files.append({**content(data, DATA), "path": target.lstrip("/")})
        component = {
            "id": cid,
            "metadata": component_metadata,
            "source": {"content_type": "application/wasm", **content(wasm, WASM)},
        }
        for key, locked_key in (("environment", "env"), ("variables", "config")):
            if spec.get(key):
                component[locked_key] = spec[key]
        if files:
            component["files"] = files
        components.append(component)

    locked = json.dumps({
        "spin_lock_version": 0,
        "metadata": metadata,
        "variables": variables,
        "triggers": triggers,
        "components": components,
    }, sort_keys=True, indent=2).encode()
    locked_digest = digest_of(locked)
    ordered = list(layers.items()) + [(locked_digest, (LOCKED, locked))]

    labels = {"com.fermyon.spin.lockedAppDigest": locked_digest}
    if args.build_id:
        labels["dev.luge.build-id"] = args.build_id
    config = json.dumps({
        "architecture": "wasm",
        "os": "wasip1",
        "config": {"Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": []},
    }, sort_keys=True).encode()
    # No platform on the index entry: a registry serves `spin registry
    # push`'s manifest as is, and containerd filters none out.
    write_image(args.out, args.name, config,
                [(media_type, data) for _, (media_type, data) in ordered])


if __name__ == "__main__":
    main()
