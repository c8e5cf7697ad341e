#!/usr/bin/env bash
# Builds the node tools the Kubernetes checks drive, from the Go module
# proxy into target/tools/k8s/bin, each once (skipped when present):
#
# - containerd v2.4.2: containerd, ctr, containerd-shim-runc-v2 (Debian's
#   containerd 1.6 is too old for Wasm layers and sandbox shims);
# - crictl (cri-tools v1.37.0), what kubelet's CRI calls look like by hand;
# - the CNI plugins v1.10.0: bridge, host-local, loopback, portmap.
#
#   deploy/kubernetes/build-tools.sh [--download-only]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tools="$root/target/tools/k8s"
bin="$tools/bin"
mkdir -p "$bin"
command -v go >/dev/null || {
    echo "build-tools.sh: Go is needed to build containerd, crictl and the CNI plugins" >&2
    exit 1
}

# name, module path and version, package
build() {
    local out="$1" module="$2" version="$3" pkg="$4" dir="$tools/src/$1"
    [ -x "$bin/$out" ] && return 0
    mkdir -p "$dir"
    (
        cd "$dir"
        [ -f go.mod ] || printf 'module luge.dev/tools/%s\n\ngo 1.26\n' "$out" >go.mod
        go get -tool "$pkg@$version" >/dev/null
        [ "${download_only:-}" = 1 ] && exit 0
        echo "building $out ($module $version)" >&2
        CGO_ENABLED="${CGO:-0}" go build -trimpath -o "$bin/$out.partial" "$pkg"
        mv "$bin/$out.partial" "$bin/$out"
    )
}

download_only=0
[ "${1:-}" = --download-only ] && download_only=1

cd_=github.com/containerd/containerd/v2
# containerd itself links btrfs and cgroup code through cgo-free paths;
# CGO stays off so the binaries are static.
build containerd "$cd_" v2.4.2 "$cd_/cmd/containerd"
build ctr "$cd_" v2.4.2 "$cd_/cmd/ctr"
build containerd-shim-runc-v2 "$cd_" v2.4.2 "$cd_/cmd/containerd-shim-runc-v2"
build crictl sigs.k8s.io/cri-tools v1.37.0 sigs.k8s.io/cri-tools/cmd/crictl
plugins=github.com/containernetworking/plugins
mkdir -p "$tools/cni"
for plugin in main/bridge main/loopback ipam/host-local meta/portmap; do
    name="${plugin#*/}"
    build "cni-$name" "$plugins" v1.10.0 "$plugins/plugins/$plugin"
    [ "$download_only" = 1 ] || ln -sf "$bin/cni-$name" "$tools/cni/$name"
done
[ "$download_only" = 1 ] || echo "node tools in $bin, CNI plugins in $tools/cni" >&2
