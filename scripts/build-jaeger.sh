#!/usr/bin/env bash
# Builds Jaeger v1.76.0 (its all-in-one mode receives OTLP) from the Go
# module proxy into target/tools/jaeger, once (about 4 minutes): the
# telemetry tests (luge_testkit::jaeger) and `luge-bench telemetry` run
# against it. scripts/test.sh runs this; the demo does not need it.
set -euo pipefail
jg="$(cd "$(dirname "$0")/.." && pwd)/target/tools/jaeger"
[ -x "$jg/jaeger" ] && exit 0
command -v go >/dev/null || {
    echo "build-jaeger.sh: Go is needed to build Jaeger for the telemetry tests" >&2
    exit 1
}
mkdir -p "$jg"
cd "$jg"
# Jaeger's modules and build cache (gigabytes) serve this one build only:
# they live beside it and go when it is done, so the Rust build that
# follows has the disk (a CI run once ran out of it linking a test binary).
export GOMODCACHE="$jg/.gomod" GOCACHE="$jg/.gocache"
trap 'go clean -modcache >/dev/null 2>&1; rm -rf "$GOMODCACHE" "$GOCACHE"' EXIT
[ -f go.mod ] || printf 'module luge.dev/tools/jaeger\n\ngo 1.26\n' >go.mod
go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0
go build -o jaeger.partial github.com/jaegertracing/jaeger/cmd/jaeger
mv jaeger.partial jaeger
