// Package soak holds the long soak test (build tag soak, run by `make soak`, outside CI's
// default path): fakectl makes a million reconciles with stack growth, forced GCs and
// recovered panics across 8 workers while the tracer follows it; the traced process must not
// crash, every entry must pair with its return, and every lost event must be counted. The
// last result is kept in RESULT.md.
package soak
