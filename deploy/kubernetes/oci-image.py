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
import io
import json
import os
import platform
import tarfile

from oci_layout import digest_of, write_image


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
    layers, diff_ids = [], []
    for directory in args.layer:
        raw = layer_of(directory)
        diff_ids.append(digest_of(raw))
        layers.append(("application/vnd.oci.image.layer.v1.tar+gzip", gzip.compress(raw, mtime=0)))
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
    write_image(args.out, args.name, config, layers, {"architecture": arch, "os": "linux"})


if __name__ == "__main__":
    main()
