#!/usr/bin/env bash
# Builds the node tools the Kubernetes checks drive, from the Go module
# proxy into target/tools/k8s/bin, each once (skipped when present):
#
# - containerd v2.4.2: containerd, ctr, containerd-shim-runc-v2 (Debian's
#   containerd 1.6 is too old for Wasm layers and sandbox shims);
# - crictl (cri-tools v1.37.0), what kubelet's CRI calls look like by hand;
# - the CNI plugins v1.10.0: bridge, host-local, loopback, portmap;
# - with --kubernetes, a single node's control plane and kubelet:
#   k8s.io/kubernetes v1.34.4 (kube-apiserver, kube-controller-manager,
#   kube-scheduler, kubelet, kubectl; about 25 minutes on 2 cores) and
#   etcd v3.6.16;
# - with --autoscaling, what scales a Luge Deployment
#   (deploy/kubernetes/autoscaling/): KEDA v2.21.0 (keda-operator,
#   keda-adapter: its metrics API server), Prometheus v0.316.0 (3.x,
#   Kubernetes service discovery only), KEDA's HTTP add-on
#   (keda-http-interceptor, -scaler, -operator) and spin-operator, the
#   last two from checkouts, not on the module proxy:
#   KEDA_HTTP_ADD_ON_SRC (kedacore/http-add-on at $HTTP_ADD_ON_COMMIT)
#   and SPIN_OPERATOR_SRC (spinkube/spin-operator at
#   $SPIN_OPERATOR_COMMIT), a work tree or a bare repository each.
#
#   deploy/kubernetes/build-tools.sh [--download-only] [--kubernetes] [--autoscaling]
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
kubernetes=0
autoscaling=0
for arg in "$@"; do
    case "$arg" in
    --download-only) download_only=1 ;;
    --kubernetes) kubernetes=1 ;;
    --autoscaling) autoscaling=1 ;;
    *)
        echo "build-tools.sh: unknown argument $arg" >&2
        exit 2
        ;;
    esac
done

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

# A module's own tree built as the main module, so that its replace
# directives and go.sum hold (KEDA replaces one of its dependencies):
# name, source (a directory to copy, or git:DIR@COMMIT), build tags, then
# OUT=PACKAGE for each binary.
build_tree() {
    local name="$1" src="$2" tags="$3" dir="$tools/src/$1" missing=() wanted
    shift 3
    for wanted in "$@"; do
        [ -x "$bin/${wanted%%=*}" ] || missing+=("$wanted")
    done
    [ "${#missing[@]}" = 0 ] && return 0
    if [ ! -f "$dir/go.mod" ]; then
        rm -rf "$dir.partial" && mkdir -p "$dir.partial"
        case "$src" in
        git:*)
            local repo="${src#git:}"
            git -C "${repo%@*}" archive "${repo##*@}" | tar -x -C "$dir.partial"
            ;;
        *) cp -r "$src/." "$dir.partial" && chmod -R u+w "$dir.partial" ;;
        esac
        mv "$dir.partial" "$dir"
    fi
    (
        cd "$dir"
        export GOWORK=off GOFLAGS=-mod=mod
        local packages=("${missing[@]#*=}")
        go list -deps -tags "$tags" "${packages[@]}" >/dev/null
        [ "${download_only:-}" = 1 ] && exit 0
        for wanted in "${missing[@]}"; do
            echo "building ${wanted%%=*} ($name)" >&2
            CGO_ENABLED=0 go build -trimpath -tags "$tags" -o "$bin/${wanted%%=*}.partial" "${wanted#*=}"
            mv "$bin/${wanted%%=*}.partial" "$bin/${wanted%%=*}"
        done
    )
}

# The source tree of a module on the proxy.
module_dir() {
    (cd "$tools" && go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
}

HTTP_ADD_ON_COMMIT=59b2f6a115ad735a108d830f4d525f8462497c7d
SPIN_OPERATOR_COMMIT=90d14cc7b112231e61f35bfd9abbf469acf8df68
if [ "$autoscaling" = 1 ]; then
    : "${KEDA_HTTP_ADD_ON_SRC:?a checkout of kedacore/http-add-on (fetch it; not on the module proxy)}"
    : "${SPIN_OPERATOR_SRC:?a checkout of spinkube/spin-operator (fetch it; not on the module proxy)}"
    build_tree keda "$(module_dir github.com/kedacore/keda/v2@v2.21.0)" "" \
        keda-operator=./cmd/operator keda-adapter=./cmd/adapter
    # Prometheus' own build tags leave out every service discovery but
    # Kubernetes' (its plugins/ directory), a third of its build.
    build_tree prometheus "$(module_dir github.com/prometheus/prometheus@v0.316.0)" \
        remove_all_sd,enable_kubernetes_sd prometheus=./cmd/prometheus
    build_tree http-add-on "git:$KEDA_HTTP_ADD_ON_SRC@$HTTP_ADD_ON_COMMIT" "" \
        keda-http-interceptor=./interceptor keda-http-scaler=./scaler keda-http-operator=./operator
    build_tree spin-operator "git:$SPIN_OPERATOR_SRC@$SPIN_OPERATOR_COMMIT" "" spin-operator=./cmd
    [ "$download_only" = 1 ] || echo "KEDA, Prometheus, the HTTP add-on and spin-operator in $bin" >&2
fi

[ "$kubernetes" = 1 ] || exit 0

# k8s.io/kubernetes is not meant to be a dependency: its go.mod replaces
# each staging module (k8s.io/api, k8s.io/client-go, ...) with a directory
# its module zip leaves out. The published staging modules of the same
# release (v0.34.4 for v1.34.4) stand in for them, as they do for anyone
# who imports Kubernetes' own packages.
build_kubernetes() {
    local version=v1.34.4 staging=v0.34.4 dir="$tools/src/kubernetes" missing=()
    local commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
    for command in "${commands[@]}"; do
        [ -x "$bin/$command" ] || missing+=("k8s.io/kubernetes/cmd/$command")
    done
    [ "${#missing[@]}" = 0 ] && return 0
    mkdir -p "$dir"
    (
        cd "$dir"
        if [ ! -f go.mod ]; then
            gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
            {
                printf 'module luge.dev/tools/kubernetes\n\ngo 1.26\n\nreplace (\n'
                awk -v v="$staging" '$2 == "=>" && $3 ~ /^\.\/staging\// { print "\t" $1 " => " $1 " " v }' "$gomod"
                printf ')\n'
            } >go.mod.partial
            mv go.mod.partial go.mod
        fi
        for command in "${commands[@]}"; do
            go get -tool "k8s.io/kubernetes/cmd/$command@$version" >/dev/null 2>&1 ||
                go get -tool "k8s.io/kubernetes/cmd/$command@$version"
        done
        [ "${download_only:-}" = 1 ] && exit 0
        echo "building ${missing[*]##*/} (k8s.io/kubernetes $version)" >&2
        mkdir -p "$tools/partial"
        # The version the binaries report (`kubectl version`, the node's
        # kubeletVersion), as Kubernetes' own build stamps it.
        local stamp=k8s.io/component-base/version
        CGO_ENABLED=0 go build -trimpath -o "$tools/partial/" -ldflags "-X $stamp.gitVersion=$version \
            -X $stamp.gitMajor=1 -X $stamp.gitMinor=$(echo "$version" | cut -d. -f2) -X $stamp.gitTreeState=clean" "${missing[@]}"
        for package in "${missing[@]}"; do
            mv "$tools/partial/${package##*/}" "$bin/"
        done
    )
}
build_kubernetes
build etcd go.etcd.io/etcd/server/v3 v3.6.16 go.etcd.io/etcd/server/v3
[ "$download_only" = 1 ] || echo "Kubernetes v1.34.4 and etcd v3.6.16 in $bin" >&2
