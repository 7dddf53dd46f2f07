//go:build tools

// Package tools pins Helm for the chart checks: test/tools/build-helm.sh builds
// helm.sh/helm/v3/cmd/helm at the version this module requires.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
