#!/usr/bin/env python3
"""Writes an OCI image layout as a tarball (what `ctr images import`
takes), from directories of files: no Docker engine and no registry.

    oci-image.py OUT.tar NAME [--layer DIR]... [--entrypoint ARG]...
                 [--env NAME=VALUE]... [--workdir DIR]

Each DIR becomes one gzip layer (its files at the image's root, owned
by root, times zeroed so the same files make the same digest); NAME
(`registry.example/app:v1`) is the image's ref name, as containerd's
import reads it. The platform is this machine's (linux/amd64 or arm64).
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import tarfile


def layer_of(directory: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for base, dirs, files in os.walk(directory):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                path = os.path.join(base, name)
                info = tar.gettarinfo(path, os.path.relpath(path, directory))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    return raw.getvalue()


def blob(out: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    out.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("name")
    p.add_argument("--layer", action="append", default=[])
    p.add_argument("--entrypoint", action="append", default=[])
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--workdir", default="/")
    args = p.parse_args()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    with tarfile.open(args.out, "w") as out:
        layers, diff_ids = [], []
        for directory in args.layer:
            raw = layer_of(directory)
            diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
            packed = gzip.compress(raw, mtime=0)
            layers.append({
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": blob(out, packed),
                "size": len(packed),
            })
        config = json.dumps({
            "architecture": arch,
            "os": "linux",
            "config": {
                "Entrypoint": args.entrypoint or None,
                "Env": args.env or None,
                "WorkingDir": args.workdir,
            },
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }, sort_keys=True).encode()
        manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": blob(out, config),
                "size": len(config),
            },
            "layers": layers,
        }, sort_keys=True).encode()
        index = json.dumps({
            "schemaVersion": 2,
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": blob(out, manifest),
                "size": len(manifest),
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": args.name,
                    "org.opencontainers.image.ref.name": args.name,
                },
            }],
        }).encode()
        for name, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                           ("index.json", index)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main()
