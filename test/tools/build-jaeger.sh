#!/usr/bin/env bash
# Builds Jaeger (github.com/jaegertracing/jaeger/cmd/jaeger v1.76.0, the all-in-one binary:
# OTLP in, in-memory storage, the query API) from the Go module proxy into a versioned cache
# folder outside the repository, for the end-to-end test's trace backend. Skips the build when
# the stamp says it is there. Prints the folder on its last line.
set -euo pipefail

JAEGER_VERSION=v1.76.0
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cache.sh"
cached jaeger "jaeger-$JAEGER_VERSION" "jaeger=$JAEGER_VERSION"
echo "building jaeger $JAEGER_VERSION (cold: several minutes)" >&2
(cd "$here/jaeger" && CGO_ENABLED=0 go build -trimpath -o "$out/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger)
built jaeger
