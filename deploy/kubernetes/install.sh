#!/bin/sh
# Installs Luge's shim on a node (run by installer.yaml's DaemonSet, or by
# hand with NODE_ROOT=/): the binary into /opt/luge/bin, the runtime
# `luge` into containerd's config (v2 or v3 schema) with /opt/luge/bin on
# the shim path, then containerd restarted (LUGE_INSTALL_RESTART=0: only
# said, for a containerd its operator restarts). Each step is skipped when
# done.
set -eu
root="${NODE_ROOT:-/}"
src="$(dirname "$0")/bin/containerd-shim-luge-v1"
mkdir -p "$root/opt/luge/bin"
if ! cmp -s "$src" "$root/opt/luge/bin/containerd-shim-luge-v1"; then
    cp "$src" "$root/opt/luge/bin/containerd-shim-luge-v1.new"
    mv "$root/opt/luge/bin/containerd-shim-luge-v1.new" "$root/opt/luge/bin/containerd-shim-luge-v1"
fi
# containerd finds a shim by name on its PATH, or in its own directory.
ln -sf /opt/luge/bin/containerd-shim-luge-v1 "$root/usr/local/bin/containerd-shim-luge-v1"
config="$root/etc/containerd/config.toml"
changed=0
if ! grep -q 'io.containerd.luge.v1' "$config" 2>/dev/null; then
    if grep -q '^version = 3' "$config" 2>/dev/null; then
        section="plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.luge"
    else
        section='plugins."io.containerd.grpc.v1.cri".containerd.runtimes.luge'
    fi
    printf '\n[%s]\n  runtime_type = "io.containerd.luge.v1"\n' "$section" >>"$config"
    changed=1
fi
if [ "$changed" = 1 ]; then
    if [ "${LUGE_INSTALL_RESTART:-1}" = 1 ]; then
        nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl restart containerd
    else
        echo "containerd's config has the runtime luge: restart containerd to load it"
    fi
fi
echo "luge runtime installed"
exec sleep infinity
