//go:build !withcgo

package main

func extra(n int) int { return n }
