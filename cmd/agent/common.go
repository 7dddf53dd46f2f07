package main

import (
	"time"

	"github.com/reconscope/reconscope/pkg/span"
)

func spanOptions(abandon time.Duration) span.Options {
	return span.Options{AbandonAfter: abandon}
}
