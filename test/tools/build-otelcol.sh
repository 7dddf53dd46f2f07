#!/usr/bin/env bash
# Builds the end-to-end test's OpenTelemetry Collector (test/tools/otelcol: the components
# deploy/otel-collector uses, OpenTelemetry Collector v0.165.0, plus contrib's k8sattributes
# processor v0.160.0) from the Go module proxy into
# a versioned cache folder outside the repository. Skips the build when the stamp says it is
# there. Prints the folder on its last line.
set -euo pipefail

OTELCOL_VERSION=v0.165.0
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cache.sh"
# The components are part of the key: main.go lists them.
sum=$(cat "$here/otelcol/main.go" "$here/otelcol/go.mod" | sha256sum | cut -c1-12)
cached otelcol "otelcol-$OTELCOL_VERSION-$sum" "otelcol=$OTELCOL_VERSION src=$sum"
echo "building otelcol $OTELCOL_VERSION (cold: a few minutes)" >&2
(cd "$here/otelcol" && CGO_ENABLED=0 go build -trimpath -o "$out/otelcol" .)
built otelcol
