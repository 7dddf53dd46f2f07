// Command hitloop calls one small function (main.work) -n times and prints the mean time per
// call in nanoseconds: the guest test of make kernels puts a probe on work's entry site, or
// on its RET, and subtracts an untraced run to get the cost of one probe hit on that kernel.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

// work has a frame (so a stack-check prologue and an entry site after it) and one RET.
//
//go:noinline
func work(x int) int {
	var buf [64]byte
	for i := range buf {
		buf[i] = byte(x + i)
	}
	return int(buf[x%64]) + x
}

func main() {
	n := flag.Int("n", 20000, "calls")
	flag.Parse()
	start := time.Now()
	sum := 0
	for i := 0; i < *n; i++ {
		sum += work(i)
	}
	fmt.Printf("%.1f\n", float64(time.Since(start).Nanoseconds())/float64(*n))
	fmt.Fprintln(os.Stderr, "checksum", sum) // keeps the calls from being optimised away
}
