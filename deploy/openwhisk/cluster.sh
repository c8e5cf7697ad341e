#!/usr/bin/env bash
# A multi-invoker OpenWhisk on this machine with Luge as the container
# backend of every invoker, driven by the real `wsk` CLI.
#
#   OPENWHISK_SRC=... PEKKO_CONNECTORS_SRC=... KAMON_SRC=... \
#   SCALA_KRYO_SRC=... PEKKO_KRYO_SRC=... OPENWHISK_CLI_SRC=... \
#       deploy/openwhisk/cluster.sh
#
# The first five are check.sh's (it builds OpenWhisk and the factory);
# OPENWHISK_CLI_SRC is a git checkout of apache/openwhisk-cli holding the
# pinned commit below. Without OPENWHISK_SRC it says so and exits 0 (CI has
# no checkout).
#
# What it installs (each step skipped when already done), all under OW_WORK
# (default target/openwhisk) except `wsk`:
#   - OpenWhisk and the factory: check.sh with OW_BUILD_ONLY=1;
#   - Kafka 3.9.1's classpath from Maven Central (build/kafka-pom.xml);
#   - pouchdb-server 4.2.0 from npm (the CouchDB API; Apache CouchDB is not
#     in Debian and Maven Central does not carry it);
#   - `wsk` from apache/openwhisk-cli at the pinned commit, into
#     target/tools/wsk. go-bindata, which generates the CLI's i18n
#     accessor, is not served by the Go module proxy; a four-line go:embed
#     file stands in for it (Asset(name) over wski18n/resources/*.json).
#   - Luge (debug build) and the test actions.
# Then cluster.py starts the cluster, runs every check and stops it all.
# OW_E2E_OUT=DIR keeps the activation records; OW_E2E_KEEP=1 prints the
# processes' logs at the end.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
log() { echo "cluster.sh: $*" >&2; }

if [[ -z "${OPENWHISK_SRC:-}" ]]; then
    echo "deploy/openwhisk/cluster.sh: SKIPPED: OPENWHISK_SRC is not set (no OpenWhisk checkout); no cluster was started"
    exit 0
fi
if [[ -z "${OPENWHISK_CLI_SRC:-}" ]]; then
    echo "cluster.sh: OPENWHISK_CLI_SRC is not set: it must name a git checkout of apache/openwhisk-cli" >&2
    exit 2
fi
# apache/openwhisk-cli master, 2024-09-24 (the newest commit).
cli_commit=23f3cf73b812b75821122d9db94e9eebda6bab54

work="${OW_WORK:-$repo/target/openwhisk}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
export OW_WORK="$work"

OW_BUILD_ONLY=1 "$here/check.sh"

if [[ ! -s "$work/kafka.cp" || "$here/build/kafka-pom.xml" -nt "$work/kafka.cp" ]]; then
    log "resolving Kafka's classpath (build/kafka-pom.xml)"
    mvn -q -B -f "$here/build/kafka-pom.xml" dependency:build-classpath -Dmdep.outputFile="$work/kafka.cp" >/dev/null
fi

pouchdb_version=4.2.0
pouchdb_patch="$here/patches/express-pouchdb-if-match.patch"
if [[ ! -f "$work/pouchdb/done" || "$pouchdb_patch" -nt "$work/pouchdb/done" ]] ||
    ! grep -q "\"version\": \"$pouchdb_version\"" "$work/pouchdb/node_modules/pouchdb-server/package.json"; then
    log "installing pouchdb-server $pouchdb_version from npm"
    rm -rf "$work/pouchdb" && mkdir -p "$work/pouchdb"
    # leveldown ships prebuilt binaries in its package; no install script
    # (and no node-gyp download) is needed.
    (cd "$work/pouchdb" && npm install --no-audit --no-fund --ignore-scripts --no-save \
        "pouchdb-server@$pouchdb_version" >/dev/null)
    patch -s -p1 -d "$work/pouchdb/node_modules/express-pouchdb" <"$pouchdb_patch"
    touch "$work/pouchdb/done"
fi

wsk="$repo/target/tools/wsk"
if [[ ! -x "$wsk" || ! -f "$work/wsk.commit" || "$(cat "$work/wsk.commit")" != "$cli_commit" ]]; then
    log "building wsk from apache/openwhisk-cli $cli_commit"
    src="$work/wsk-src"
    rm -rf "$src" && mkdir -p "$src"
    git -C "$OPENWHISK_CLI_SRC" archive "$cli_commit" | tar -x -C "$src"
    cat >"$src/wski18n/embedded_resources.go" <<'GO'
package wski18n

import (
	"embed"
	"path/filepath"
	"strings"
)

//go:embed resources/*.json
var resources embed.FS

// Asset stands in for the accessor go-bindata generates: name is
// wski18n/resources/<file>, as i18n.go asks for it.
func Asset(name string) ([]byte, error) {
	return resources.ReadFile(strings.TrimPrefix(filepath.ToSlash(name), "wski18n/"))
}
GO
    # go:embed needs the module to say go 1.16 or later.
    sed -i 's/^go 1\.15$/go 1.16/' "$src/go.mod"
    mkdir -p "$(dirname "$wsk")"
    (cd "$src" && go build -ldflags "-X main.CLI_BUILD_TIME=$cli_commit" -o "$wsk" .)
    echo "$cli_commit" >"$work/wsk.commit"
fi

# OpenWhisk's database design documents, as its deployment installs them.
rm -rf "$work/ow-files" && mkdir -p "$work/ow-files"
git -C "$OPENWHISK_SRC" archive HEAD ansible/files | tar -x -C "$work/ow-files"

log "building luge and the test actions"
(cd "$repo" && cargo build --quiet -p luge-executor --bin luge && ./scripts/build-actions.sh >/dev/null)

exec python3 "$here/cluster.py" "$work"
