//go:build withcgo

package main

/*
static int add(int a, int b) { return a + b; }
*/
import "C"

// extra calls into C, which makes the linker link externally.
func extra(n int) int { return int(C.add(C.int(n), 1)) }
