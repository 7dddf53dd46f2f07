package main

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 Empty bpf/empty.bpf.c -- -I../../bpf/include
