// Package compat measures the Go toolchain and controller-runtime matrix: programs built
// with each toolchain and against each controller-runtime release, plain and stripped, traced
// against the test bed's kube-apiserver with exact spans. `make compat` runs every cell and
// writes the toolchains region of docs/compatibility.md; CI runs a sample.
package compat
