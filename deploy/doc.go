// Package deploy holds no code: it is the folder of reconscope's Kubernetes manifests
// (daemonset.yaml and kustomization.yaml; otel-collector/, a kustomization of its own), the
// Helm chart (helm/reconscope), the alert rules (prometheus/) and the Grafana dashboard
// (grafana/reconscope-dashboard.json). Its tests check that the chart's default render and
// the kustomization make the same agent, that promtool accepts the rules and their unit tests
// pass, that the manifests parse, keep the
// security properties of DESIGN.md §7 (RBAC get/list/watch on pods only; ALL capabilities
// dropped and four added back, each with a comment saying why; hostPID; read-only root
// filesystem), that a real kube-apiserver accepts them, and that the dashboard queries only
// metrics the agent exports.
package deploy
