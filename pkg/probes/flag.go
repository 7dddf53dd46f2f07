package probes

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParseSyncProbe parses a user-defined sync-handler probe:
//
//	SYMBOL=controller:NAME[,key:SLOT][,err:SLOT]
//
// SYMBOL is the function's full name as `go tool nm` prints it, for example
// `example.com/op/pkg/ctl.(*Controller).syncHandler`. Every call is one span of controller
// NAME. key:SLOT is the register slot of the key string's data pointer (its length is in the
// next slot): for a method `func (c *C) sync(ctx context.Context, key string) error` the
// receiver is slot 0, ctx slots 1-2, so the key is slot 3 (the default). err:SLOT is the slot
// of the returned error's first word at return (default 0: an error as the only result).
// The key is split at its first '/' into namespace and name, as client-go's cache keys are.
func ParseSyncProbe(spec string) (*Probe, error) {
	symbol, opts, ok := strings.Cut(spec, "=")
	symbol = strings.TrimSpace(symbol)
	if !ok || symbol == "" {
		return nil, fmt.Errorf("probe %q: want SYMBOL=controller:NAME[,key:SLOT][,err:SLOT]", spec)
	}
	if !utf8.ValidString(symbol) {
		return nil, fmt.Errorf("probe %q: the symbol is not valid UTF-8: copy it from `go tool nm`", spec)
	}
	controller, key, errSlot := "", 3, 0
	for _, kv := range strings.Split(opts, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), ":")
		if !ok {
			return nil, fmt.Errorf("probe %q: option %q: want NAME:VALUE", spec, kv)
		}
		switch k {
		case "controller":
			controller = v
		case "key", "err":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 7 {
				return nil, fmt.Errorf("probe %q: %s:%s: want a register slot from 0 to 7", spec, k, v)
			}
			if k == "key" {
				key = n
			} else {
				errSlot = n
			}
		default:
			return nil, fmt.Errorf("probe %q: unknown option %q (controller, key, err)", spec, k)
		}
	}
	if controller == "" {
		return nil, fmt.Errorf("probe %q: controller:NAME is required", spec)
	}
	return SyncProbe(controller, symbol, layout().str(0, str(key, key+1)), layout().err(errSlot)), nil
}
