package exporter

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends j as encoding/json's Encoder writes it (the same bytes: fields in order,
// omitempty, strings escaped with HTML escaping, times in RFC 3339 with nanoseconds), followed
// by a newline: one JSON line. It does by hand what encoding/json does by reflection, at a
// fraction of its cost per span (BenchmarkJSONWriter); TestAppendJSONMatchesEncodingJSON keeps
// the two equal, for every field of JSONSpan.
func AppendJSON(b []byte, j *JSONSpan) []byte {
	b = append(b, `{"schema":`...)
	b = appendString(b, j.Schema)
	b = append(b, `,"controller":`...)
	b = appendString(b, j.Controller)
	b = append(b, `,"namespace":`...)
	b = appendString(b, j.Namespace)
	b = append(b, `,"name":`...)
	b = appendString(b, j.Name)
	if j.ItemType != "" {
		b = append(b, `,"item_type":`...)
		b = appendString(b, j.ItemType)
	}
	b = append(b, `,"uid":`...)
	b = appendString(b, j.UID)
	b = append(b, `,"resource_version":`...)
	b = appendString(b, j.ResourceVersion)
	b = append(b, `,"reconcile_id":`...)
	b = appendString(b, j.ReconcileID)
	b = append(b, `,"start":`...)
	b = appendTime(b, j.Start)
	b = append(b, `,"duration_ns":`...)
	b = strconv.AppendInt(b, j.DurationNS, 10)
	b = append(b, `,"result":`...)
	b = appendString(b, j.Result)
	b = append(b, `,"requeue_after_ns":`...)
	b = strconv.AppendInt(b, j.RequeueAfterNS, 10)
	b = append(b, `,"error_type":`...)
	b = appendString(b, j.ErrorType)
	b = append(b, `,"error":`...)
	b = appendString(b, j.Error)
	b = append(b, `,"pid":`...)
	b = strconv.AppendUint(b, uint64(j.PID), 10)
	b = append(b, `,"goid":`...)
	b = strconv.AppendInt(b, j.Goid, 10)
	b = append(b, `,"exe":`...)
	b = appendString(b, j.Exe)
	b = append(b, `,"pod":`...)
	b = appendString(b, j.Pod)
	b = append(b, `,"container":`...)
	b = appendString(b, j.Container)
	p := &j.Phases
	b = append(b, `,"phases":{"fetch_ns":`...)
	b = strconv.AppendInt(b, p.FetchNS, 10)
	b = append(b, `,"diff_ns":`...)
	b = strconv.AppendInt(b, p.DiffNS, 10)
	b = append(b, `,"apply_ns":`...)
	b = strconv.AppendInt(b, p.ApplyNS, 10)
	b = append(b, `,"read_ns":`...)
	b = strconv.AppendInt(b, p.ReadNS, 10)
	b = append(b, `,"write_ns":`...)
	b = strconv.AppendInt(b, p.WriteNS, 10)
	b = append(b, `,"compute_ns":`...)
	b = strconv.AppendInt(b, p.ComputeNS, 10)
	b = append(b, `},"queue_wait_ns":`...)
	b = strconv.AppendInt(b, j.QueueWaitNS, 10)
	b = append(b, `,"backoff_ns":`...)
	b = strconv.AppendInt(b, j.BackoffNS, 10)
	b = append(b, `,"triggers":`...)
	b = appendList(b, j.Triggers, appendTrigger)
	if j.TriggersDropped != 0 {
		b = append(b, `,"triggers_dropped":`...)
		b = strconv.AppendInt(b, int64(j.TriggersDropped), 10)
	}
	b = append(b, `,"trigger_controller":`...)
	b = appendString(b, j.TriggerController)
	b = append(b, `,"trigger_lag_ns":`...)
	b = strconv.AppendInt(b, j.TriggerLagNS, 10)
	b = append(b, `,"read_version_writer":`...)
	b = appendString(b, j.ReadVersionWriter)
	b = append(b, `,"calls":`...)
	b = appendList(b, j.Calls, appendCall)
	if len(j.Fights) > 0 {
		b = append(b, `,"fights":`...)
		b = appendList(b, j.Fights, appendFight)
	}
	if len(j.HotLoops) > 0 {
		b = append(b, `,"hot_loops":`...)
		b = appendList(b, j.HotLoops, appendHotLoop)
	}
	if len(j.StaleReads) > 0 {
		b = append(b, `,"stale_reads":`...)
		b = appendList(b, j.StaleReads, appendStaleRead)
	}
	b = append(b, `,"noop":`...)
	b = strconv.AppendBool(b, j.Noop)
	b = append(b, `,"incomplete":`...)
	b = strconv.AppendBool(b, j.Incomplete)
	b = append(b, `,"probe_hits":{"emulated":`...)
	b = strconv.AppendUint(b, uint64(j.ProbeHits.Emulated), 10)
	b = append(b, `,"single_stepped":`...)
	b = strconv.AppendUint(b, uint64(j.ProbeHits.SingleStepped), 10)
	return append(b, "}}\n"...)
}

func appendTrigger(b []byte, t *JSONTrigger) []byte {
	b = append(b, `{"kind":`...)
	b = appendString(b, t.Kind)
	b = appendOmitEmpty(b, `,"event":`, t.Event)
	b = appendOmitEmpty(b, `,"object_kind":`, t.ObjectKind)
	b = appendOmitEmpty(b, `,"namespace":`, t.Namespace)
	b = appendOmitEmpty(b, `,"name":`, t.Name)
	b = appendOmitEmpty(b, `,"uid":`, t.UID)
	b = appendOmitEmpty(b, `,"resource_version":`, t.ResourceVersion)
	b = appendOmitEmpty(b, `,"writer":`, t.Writer)
	b = appendOmitEmpty(b, `,"function":`, t.Function)
	b = append(b, `,"time":`...)
	b = appendTime(b, t.Time)
	return append(b, '}')
}

func appendCall(b []byte, c *JSONCall) []byte {
	b = append(b, `{"kind":`...)
	b = appendString(b, c.Kind)
	b = append(b, `,"verb":`...)
	b = appendString(b, c.Verb)
	b = append(b, `,"resource":`...)
	b = appendString(b, c.Resource)
	b = append(b, `,"subresource":`...)
	b = appendString(b, c.Subresource)
	b = append(b, `,"namespace":`...)
	b = appendString(b, c.Namespace)
	b = append(b, `,"name":`...)
	b = appendString(b, c.Name)
	b = append(b, `,"uid":`...)
	b = appendString(b, c.UID)
	b = append(b, `,"resource_version":`...)
	b = appendString(b, c.ResourceVersion)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(c.Status), 10)
	b = appendOmitEmpty(b, `,"outcome":`, c.Outcome)
	b = appendOmitEmpty(b, `,"conflict_writer":`, c.ConflictWriter)
	b = append(b, `,"start":`...)
	b = appendTime(b, c.Start)
	b = append(b, `,"duration_ns":`...)
	b = strconv.AppendInt(b, c.DurationNS, 10)
	b = append(b, `,"depth":`...)
	b = strconv.AppendInt(b, int64(c.Depth), 10)
	return append(b, '}')
}

func appendFight(b []byte, f *JSONFight) []byte {
	b = append(b, `{"namespace":`...)
	b = appendString(b, f.Namespace)
	b = append(b, `,"name":`...)
	b = appendString(b, f.Name)
	b = append(b, `,"uid":`...)
	b = appendString(b, f.UID)
	b = append(b, `,"resource":`...)
	b = appendString(b, f.Resource)
	b = append(b, `,"subresource":`...)
	b = appendString(b, f.Subresource)
	b = append(b, `,"writers":`...)
	if f.Writers == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, w := range f.Writers {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, w)
		}
		b = append(b, ']')
	}
	b = append(b, `,"pids":`...)
	if f.PIDs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, p := range f.PIDs {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(p), 10)
		}
		b = append(b, ']')
	}
	b = append(b, `,"alternations":`...)
	b = strconv.AppendInt(b, int64(f.Alternations), 10)
	b = append(b, `,"start":`...)
	b = strconv.AppendBool(b, f.Start)
	return append(b, '}')
}

func appendHotLoop(b []byte, h *JSONHotLoop) []byte {
	b = append(b, `{"kind":`...)
	b = appendString(b, h.Kind)
	b = append(b, `,"namespace":`...)
	b = appendString(b, h.Namespace)
	b = append(b, `,"name":`...)
	b = appendString(b, h.Name)
	b = append(b, `,"uid":`...)
	b = appendString(b, h.UID)
	b = appendOmitEmpty(b, `,"resource":`, h.Resource)
	b = appendOmitEmpty(b, `,"subresource":`, h.Subresource)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, int64(h.Count), 10)
	b = append(b, `,"start":`...)
	b = strconv.AppendBool(b, h.Start)
	return append(b, '}')
}

func appendStaleRead(b []byte, r *JSONStaleRead) []byte {
	b = append(b, `{"namespace":`...)
	b = appendString(b, r.Namespace)
	b = append(b, `,"name":`...)
	b = appendString(b, r.Name)
	b = append(b, `,"uid":`...)
	b = appendString(b, r.UID)
	b = append(b, `,"resource":`...)
	b = appendString(b, r.Resource)
	b = append(b, `,"resource_version":`...)
	b = appendString(b, r.ResourceVersion)
	b = append(b, `,"newer_resource_version":`...)
	b = appendString(b, r.NewerResourceVersion)
	b = append(b, `,"newer_writer":`...)
	b = appendString(b, r.NewerWriter)
	b = append(b, `,"age_ns":`...)
	b = strconv.AppendInt(b, r.AgeNS, 10)
	return append(b, '}')
}

// appendList appends a JSON array of items ("null" for a nil slice, as encoding/json).
func appendList[T any](b []byte, items []T, each func([]byte, *T) []byte) []byte {
	if items == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = each(b, &items[i])
	}
	return append(b, ']')
}

// appendOmitEmpty appends key and s unless s is empty (an omitempty string field).
func appendOmitEmpty(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(append(b, key...), s)
}

// appendTime appends t as time.Time's MarshalJSON does: RFC 3339 with nanoseconds, quoted.
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string the way encoding/json does with HTML escaping on
// (its Encoder's default): <, > and & as \u003c, \u003e and \u0026, control characters as
// \b, \f, \n, \r, \t or \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
