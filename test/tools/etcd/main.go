// Command etcd is etcd's own server main, wrapped so that it builds from the Go module proxy
// for the reconscope test bed.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
