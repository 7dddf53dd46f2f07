package bpf

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// TestLayout checks that every struct crossing between the kernel and user space has, in
// the BTF of both committed objects, the same size and field offsets as its Go type.
func TestLayout(t *testing.T) {
	goTypes := map[string]reflect.Type{
		"event":       reflect.TypeFor[TraceEvent](),
		"event_head":  reflect.TypeFor[TraceEventHead](),
		"site_config": reflect.TypeFor[TraceSiteConfig](),
		"str_spec":    reflect.TypeFor[TraceStrSpec](),
		"val_spec":    reflect.TypeFor[TraceValSpec](),
		"err_key":     reflect.TypeFor[TraceErrKey](),
		"err_layout":  reflect.TypeFor[TraceErrLayout](),
		"g_key":       reflect.TypeFor[TraceG_key](),
		"g_state":     reflect.TypeFor[TraceG_state](),
		"ctl_key":     reflect.TypeFor[TraceCtlKey](),
		"exe_id":      reflect.TypeFor[TraceExeId](),
		"exec_event":  reflect.TypeFor[TraceExecEvent](),
	}
	for _, obj := range []string{"trace_x86_bpfel.o", "trace_arm64_bpfel.o"} {
		spec, err := ebpf.LoadCollectionSpec(obj)
		if err != nil {
			t.Fatalf("load %s: %v", obj, err)
		}
		for name, gt := range goTypes {
			var st *btf.Struct
			if err := spec.Types.TypeByName(name, &st); err != nil {
				t.Fatalf("%s: BTF struct %s: %v", obj, name, err)
			}
			if uint32(gt.Size()) != st.Size {
				t.Errorf("%s: %s: Go size %d, C size %d", obj, name, gt.Size(), st.Size)
			}
			var fields []reflect.StructField
			for i := 0; i < gt.NumField(); i++ {
				if f := gt.Field(i); f.Name != "_" {
					fields = append(fields, f)
				}
			}
			if len(fields) != len(st.Members) {
				t.Errorf("%s: %s: Go has %d fields, C has %d", obj, name, len(fields), len(st.Members))
				continue
			}
			for i, m := range st.Members {
				f := fields[i]
				if uint32(f.Offset) != m.Offset.Bytes() {
					t.Errorf("%s: %s.%s at %d in C, %s at %d in Go", obj, name, m.Name, m.Offset.Bytes(), f.Name, f.Offset)
				}
				if want := strings.ReplaceAll(m.Name, "_", ""); !strings.EqualFold(want, f.Name) {
					t.Errorf("%s: %s field %d: C %s, Go %s", obj, name, i, m.Name, f.Name)
				}
			}
		}
	}
}

// TestEventHeadIsPrefix checks that a whole event starts with the fields of struct event_head,
// at the same offsets: the program fills either through one struct event_head pointer, and the
// collector reads the head of both records through one type.
func TestEventHeadIsPrefix(t *testing.T) {
	head, event := reflect.TypeFor[TraceEventHead](), reflect.TypeFor[TraceEvent]()
	for i := 0; i < head.NumField(); i++ {
		h := head.Field(i)
		e := event.Field(i)
		if h.Name != e.Name || h.Offset != e.Offset || h.Type != e.Type {
			t.Errorf("field %d: event_head has %s %s at %d, event %s %s at %d", i, h.Name, h.Type, h.Offset, e.Name, e.Type, e.Offset)
		}
	}
	if head.Size()%8 != 0 {
		t.Errorf("event_head is %d bytes, not a multiple of 8: records after it would be misaligned", head.Size())
	}
}

// TestCounters: the counters map has a slot for every counter of enum counter.
func TestCounters(t *testing.T) {
	for _, obj := range []string{"trace_x86_bpfel.o", "trace_arm64_bpfel.o"} {
		spec, err := ebpf.LoadCollectionSpec(obj)
		if err != nil {
			t.Fatalf("load %s: %v", obj, err)
		}
		if got := spec.Maps[TraceMapCounters].MaxEntries; got != uint32(TraceCounterCOUNTER_MAX) {
			t.Errorf("%s: counters map has %d entries, COUNTER_MAX is %d", obj, got, TraceCounterCOUNTER_MAX)
		}
	}
}
