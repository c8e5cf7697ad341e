#!/usr/bin/env bash
# Compiles Luge's WasmContainerFactory against a real OpenWhisk checkout and
# runs actions through OpenWhisk's standalone server with it.
#
#   OPENWHISK_SRC=/path/to/openwhisk deploy/openwhisk/check.sh
#
# Without OPENWHISK_SRC it says so and exits 0 (CI has no checkout).
#
# OpenWhisk builds with Gradle, whose distributions are not reachable here,
# so this script builds it with what the registries serve: Maven resolves the
# third-party classpath (build/pom.xml), the Pekko gRPC Maven plugin generates
# the scheduler's protocol (build/grpc-pom.xml), and scalac 2.13 (from Maven
# Central) compiles common/scala, core/scheduler, core/invoker,
# core/controller, tools/admin and core/standalone. Four libraries Maven
# Central does not serve for Scala 2.13 are compiled from their sources,
# given as git checkouts (any clone holding the pinned tag):
#
#   PEKKO_CONNECTORS_SRC  apache/pekko-connectors        v1.1.0 (file)
#   KAMON_SRC             kamon-io/Kamon                 v2.2.2 (kamon-statsd)
#   SCALA_KRYO_SRC        altoo-ag/scala-kryo-serialization  v1.3.0
#   PEKKO_KRYO_SRC        altoo-ag/pekko-kryo-serialization  v1.3.0
#
# The changes Scala 2.13 needs in OpenWhisk's own sources are kept as
# patches/openwhisk-scala-2.13.patch and applied to a copy; the checkout is
# never modified.
#
# Steps (each skipped when its output is newer than its inputs):
#   1. classpath, generated sources and the four libraries
#   2. OpenWhisk modules, then the factory, with -Werror
#   3. the end-to-end run (e2e.py: OpenWhisk's standalone server with the
#      factory, driven through its REST API) unless OW_SKIP_E2E=1
# OW_BUILD_ONLY=1 stops after step 2 (cluster.sh builds this way).
#
# OW_WORK (default target/openwhisk) holds everything built.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

if [[ -z "${OPENWHISK_SRC:-}" ]]; then
    echo "deploy/openwhisk/check.sh: SKIPPED: OPENWHISK_SRC is not set (no OpenWhisk checkout); the factory was not compiled and no OpenWhisk ran"
    exit 0
fi

work="${OW_WORK:-$repo/target/openwhisk}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
scala_version=2.13.16
log() { echo "check.sh: $*" >&2; }

need() {
    local var=$1 what=$2
    if [[ -z "${!var:-}" ]]; then
        echo "check.sh: $var is not set: it must name a git checkout of $what" >&2
        exit 2
    fi
}
need PEKKO_CONNECTORS_SRC apache/pekko-connectors
need KAMON_SRC kamon-io/Kamon
need SCALA_KRYO_SRC altoo-ag/scala-kryo-serialization
need PEKKO_KRYO_SRC altoo-ag/pekko-kryo-serialization

ow_commit="$(git -C "$OPENWHISK_SRC" rev-parse HEAD)"
log "OpenWhisk $ow_commit"

# --- 1. Tools and classpath ------------------------------------------------

mvn_q() { mvn -q -B "$@"; }

compiler_cp="$work/compiler.cp"
if [[ ! -s "$compiler_cp" ]]; then
    log "resolving scalac $scala_version"
    mvn_q dependency:get -Dartifact="org.scala-lang:scala-compiler:$scala_version" >/dev/null
    m2="${MAVEN_REPO:-$HOME/.m2/repository}/org/scala-lang"
    echo "$m2/scala-compiler/$scala_version/scala-compiler-$scala_version.jar:$m2/scala-reflect/$scala_version/scala-reflect-$scala_version.jar:$m2/scala-library/$scala_version/scala-library-$scala_version.jar" >"$compiler_cp"
fi

deps_cp="$work/deps.cp"
if [[ ! -s "$deps_cp" || "$here/build/pom.xml" -nt "$deps_cp" ]]; then
    log "resolving OpenWhisk's dependencies (build/pom.xml)"
    mvn_q -f "$here/build/pom.xml" dependency:build-classpath -Dmdep.outputFile="$deps_cp" >/dev/null
fi

# scalac OUT CLASSPATH [OPTIONS...] -- SOURCES...: compiles Scala (and reads
# Java) sources into OUT, then compiles the Java ones with javac.
scalac() {
    local out=$1 cp=$2
    shift 2
    local opts=()
    while [[ $1 != -- ]]; do
        opts+=("$1")
        shift
    done
    shift
    rm -rf "$out" && mkdir -p "$out"
    local list="$out.sources"
    find "$@" -name '*.scala' -o -name '*.java' | sort >"$list"
    java -Xss8m -Xmx3g -cp "$(cat "$compiler_cp")" scala.tools.nsc.Main \
        -release 11 -encoding UTF-8 -nowarn -d "$out" -classpath "$cp" "${opts[@]}" "@$list"
    if grep -q '\.java$' "$list"; then
        javac -nowarn --release 11 -encoding UTF-8 -d "$out" -cp "$out:$cp" $(grep '\.java$' "$list")
    fi
}

# unpack SRC TAG OUT PATHS...: the files of PATHS at TAG of the git checkout SRC
unpack() {
    local src=$1 tag=$2 out=$3
    shift 3
    rm -rf "$out" && mkdir -p "$out"
    git -C "$src" archive "$tag" "$@" | tar -x -C "$out"
}

libs="$work/libs"
mkdir -p "$libs"
build_lib() {
    local name=$1 src=$2 tag=$3 cp=$4 opts=$5
    shift 5
    if [[ -f "$libs/$name.done" && "$libs/$name.done" -nt "$deps_cp" ]]; then
        return
    fi
    log "building $name from $tag"
    # Sources, and the resources (reference.conf) beside them.
    local paths=("$@")
    for p in "$@"; do
        if [[ -n "$(git -C "$src" ls-tree "$tag" "${p%/scala*}/resources")" ]]; then
            paths+=("${p%/scala*}/resources")
        fi
    done
    unpack "$src" "$tag" "$work/src-$name" "${paths[@]}"
    local dirs=()
    for p in "$@"; do dirs+=("$work/src-$name/$p"); done
    # shellcheck disable=SC2086
    scalac "$libs/$name" "$cp" $opts -- "${dirs[@]}"
    for p in "$@"; do
        if [[ -d "$work/src-$name/${p%/scala*}/resources" ]]; then
            cp -r "$work/src-$name/${p%/scala*}/resources/." "$libs/$name/"
        fi
    done
    touch "$libs/$name.done"
}

cp0="$(cat "$deps_cp")"
build_lib connectors-file "$PEKKO_CONNECTORS_SRC" v1.1.0 "$cp0" "" file/src/main/scala file/src/main/java
build_lib kamon-statsd "$KAMON_SRC" v2.2.2 "$cp0" "" reporters/kamon-statsd/src/main/scala
build_lib scala-kryo "$SCALA_KRYO_SRC" v1.3.0 "$cp0" "-Xsource:3" core/src/main/scala core/src/main/scala-2.13
build_lib pekko-kryo "$PEKKO_KRYO_SRC" v1.3.0 "$cp0:$libs/scala-kryo" "-Xsource:3" pekko-kryo-serialization/src/main/scala
libs_cp="$libs/connectors-file:$libs/kamon-statsd:$libs/scala-kryo:$libs/pekko-kryo"

# --- 2. OpenWhisk ----------------------------------------------------------

ow="$work/ow-src"
stamp="$work/ow-src.commit"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$ow_commit" || "$here/patches/openwhisk-scala-2.13.patch" -nt "$stamp" ]]; then
    log "copying OpenWhisk $ow_commit and applying patches/openwhisk-scala-2.13.patch"
    rm -rf "$ow" "$work/classes"
    mkdir -p "$ow"
    git -C "$OPENWHISK_SRC" archive "$ow_commit" common core tools/admin | tar -x -C "$ow"
    if [[ -s "$here/patches/openwhisk-scala-2.13.patch" ]]; then
        patch -s -p1 -d "$ow" <"$here/patches/openwhisk-scala-2.13.patch"
    fi
    echo "$ow_commit" >"$stamp"
fi

if [[ ! -f "$work/grpc.done" ]]; then
    log "generating the scheduler's gRPC sources"
    rm -rf "$work/grpc" && mkdir -p "$work/grpc/src/main/protobuf"
    cp "$here/build/grpc-pom.xml" "$work/grpc/pom.xml"
    cp "$ow"/core/scheduler/src/main/protobuf/*.proto "$work/grpc/src/main/protobuf/"
    (cd "$work/grpc" && mvn_q generate-sources >/dev/null)
    touch "$work/grpc.done"
fi

classes="$work/classes"
mkdir -p "$classes"
cp_ow="$cp0:$libs_cp"
module() {
    local name=$1
    shift
    if [[ -f "$classes/$name.done" && "$classes/$name.done" -nt "$deps_cp" ]]; then
        cp_ow="$cp_ow:$classes/$name"
        return
    fi
    log "compiling OpenWhisk $name"
    scalac "$classes/$name" "$cp_ow" -- "$@"
    for d in "$@"; do
        if [[ -d "$d/../resources" ]]; then
            cp -r "$d/../resources/." "$classes/$name/"
        fi
    done
    touch "$classes/$name.done"
    cp_ow="$cp_ow:$classes/$name"
}
module common "$ow/common/scala/src/main/scala"
module scheduler "$ow/core/scheduler/src/main/scala" "$work/grpc/target/generated-sources/pekko-grpcscala"
module invoker "$ow/core/invoker/src/main/scala"
module controller "$ow/core/controller/src/main/scala"
module admin "$ow/tools/admin/src/main/scala"
module standalone "$ow/core/standalone/src/main/scala"
echo "$cp_ow" >"$work/openwhisk.cp"

# The factory: compiled with every warning an error, so an override that
# overrides nothing, a deprecated call or a weaker access fails the check.
log "compiling Luge's WasmContainerFactory against OpenWhisk $ow_commit"
rm -rf "$work/factory" && mkdir -p "$work/factory"
java -Xss8m -cp "$(cat "$compiler_cp")" scala.tools.nsc.Main \
    -release 11 -encoding UTF-8 -deprecation -feature -unchecked -Xlint -Werror \
    -d "$work/factory" -classpath "$cp_ow" \
    $(find "$here/src/main/scala" -name '*.scala' | sort)
log "the factory compiles against OpenWhisk $ow_commit with no warnings"
if [[ "${OW_BUILD_ONLY:-0}" == 1 ]]; then
    exit 0
fi

# OpenWhisk's canonical runtime suite (tests/.../BasicActionRunnerTests,
# unchanged) against the `luge proxy` action image, through OpenWhisk's own
# ActionContainer harness; a stand-in `docker` (runner/docker) starts the
# image's `luge proxy` on a loopback address of its own.
log "building luge and the test actions"
(cd "$repo" && cargo build --quiet -p luge-executor --bin luge && ./scripts/build-actions.sh >/dev/null)
runner_cp="$work/runner.cp"
if [[ ! -s "$runner_cp" || "$here/build/runner-pom.xml" -nt "$runner_cp" ]]; then
    mvn_q -f "$here/build/runner-pom.xml" dependency:build-classpath -Dmdep.outputFile="$runner_cp" >/dev/null
fi
tests_src="$work/ow-tests"
rm -rf "$tests_src" && mkdir -p "$tests_src"
git -C "$OPENWHISK_SRC" archive "$ow_commit" tests/src/test/scala/actionContainers/ActionContainer.scala \
    tests/src/test/scala/actionContainers/BasicActionRunnerTests.scala \
    tests/src/test/scala/common/StreamLogging.scala tests/src/test/scala/common/WhiskProperties.java \
    tests/src/test/scala/common/Pair.java |
    tar -x -C "$tests_src"
log "compiling OpenWhisk's BasicActionRunnerTests with Luge's WasmActionRunnerTests"
# OpenWhisk's classpath first: its scala-library (2.13.16) wins over scalatest's.
test_cp="$cp_ow:$(cat "$runner_cp")"
scalac "$work/runner-classes" "$test_cp" -- "$tests_src" "$here/runner"
runner_state="$(mktemp -d)"
docker_targets=()
for bin in /usr/bin/docker /usr/local/bin/docker; do
    [[ -e "$bin" ]] && docker_targets+=("$bin")
done
if [[ ${#docker_targets[@]} -gt 0 ]]; then
    mounts=""
    for bin in "${docker_targets[@]}"; do mounts+="mount --bind $here/runner/docker $bin && "; done
else
    mounts="mount -t tmpfs tmpfs /usr/local/bin && cp $here/runner/docker /usr/local/bin/docker && "
fi
log "running OpenWhisk's runtime suite against luge proxy"
if ! LUGE_BIN="$repo/target/debug/luge" LUGE_RUNNER_STATE="$runner_state" LUGE_WASM_DIR="$repo/target/wasm" \
    unshare -rm sh -c "${mounts}exec \"\$@\"" sh \
    java -Dopenwhisk.home="$ow" -Dwhisk.server=http://127.0.0.1:1 -Dpekko.actor.provider=local \
    -cp "$work/runner-classes:$test_cp" org.scalatest.tools.Runner -oW \
    -s runtime.actionContainers.WasmActionRunnerTests \
    -s runtime.actionContainers.WasmZipActionRunnerTests >"$work/runner.log" 2>&1; then
    cat "$work/runner.log"
    echo "check.sh: OpenWhisk's runtime suite failed against luge proxy" >&2
    exit 1
fi
grep -E "Tests: succeeded|TEST FAILED" "$work/runner.log" >&2 || true
# Containers the suite did not kill (it kills each at its end).
for pid in "$runner_state"/*.pid; do
    [[ -e "$pid" ]] && kill "$(cat "$pid")" 2>/dev/null || true
done
rm -rf "$runner_state"

if [[ "${OW_SKIP_E2E:-0}" == 1 ]]; then
    log "OW_SKIP_E2E=1: the end-to-end run was skipped"
    exit 0
fi
exec python3 "$here/e2e.py" "$work"
