package exporter

import (
	"regexp"
	"strings"
	"testing"

	"github.com/reconscope/reconscope/pkg/span"
)

type captureWriter struct{ spans []span.Span }

func (c *captureWriter) Write(s *span.Span) error { c.spans = append(c.spans, *s); return nil }

func TestRedactor(t *testing.T) {
	const msg = `Get "https://db.internal:5432/?password=hunter2": dial tcp 10.0.0.7:5432: connection refused`
	for _, c := range []struct {
		name     string
		opts     RedactOptions
		want     string
		redacted uint64
	}{
		{"off", RedactOptions{}, msg, 0},
		{"drop", RedactOptions{DropErrorMessages: true}, "", 1},
		{"pattern", RedactOptions{Patterns: mustPatterns(t, `password=[^"&\s]+`)}, `Get "https://db.internal:5432/?` + Redacted + `": dial tcp 10.0.0.7:5432: connection refused`, 1},
		{"patterns in order", RedactOptions{Patterns: mustPatterns(t, `password=[^"&\s]+`, `\b\d{1,3}(\.\d{1,3}){3}\b`)},
			`Get "https://db.internal:5432/?` + Redacted + `": dial tcp ` + Redacted + `:5432: connection refused`, 1},
		{"no match", RedactOptions{Patterns: mustPatterns(t, `token=\S+`)}, msg, 0},
		{"every match", RedactOptions{Patterns: mustPatterns(t, `\d+`)},
			`Get "https://db.internal:` + Redacted + `/?password=hunter` + Redacted + `": dial tcp ` + Redacted + `.` + Redacted + `.` + Redacted + `.` + Redacted + `:` + Redacted + `: connection refused`, 1},
		{"drop wins over patterns", RedactOptions{DropErrorMessages: true, Patterns: mustPatterns(t, `password=[^"&\s]+`)}, "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out captureWriter
			r := NewRedactor(c.opts, &out)
			in := []span.Span{
				{Controller: "c", Name: "a", Result: span.ResultError, ErrorType: "*url.Error", Error: msg},
				{Controller: "c", Name: "b", Result: span.ResultSuccess},
			}
			for i := range in {
				if err := r.Write(&in[i]); err != nil {
					t.Fatal(err)
				}
			}
			if len(out.spans) != 2 {
				t.Fatalf("%d spans passed, want 2", len(out.spans))
			}
			got := out.spans[0]
			if got.Error != c.want {
				t.Errorf("error message %q, want %q", got.Error, c.want)
			}
			if got.ErrorType != "*url.Error" || got.Result != span.ResultError {
				t.Errorf("type %q result %v: redaction changed more than the message", got.ErrorType, got.Result)
			}
			if out.spans[1].Error != "" {
				t.Errorf("a span without error got %q", out.spans[1].Error)
			}
			if n := r.RedactedMessages(); n != c.redacted {
				t.Errorf("RedactedMessages = %d, want %d", n, c.redacted)
			}
			if c.opts.Enabled() != (c.name != "off") {
				t.Errorf("Enabled() = %v", c.opts.Enabled())
			}
		})
	}
}

func TestParseRedactPatterns(t *testing.T) {
	if _, err := ParseRedactPatterns([]string{`(`}); err == nil || !strings.Contains(err.Error(), `redaction pattern "("`) {
		t.Errorf("bad pattern: %v", err)
	}
	if _, err := ParseRedactPatterns([]string{`x*`}); err == nil || !strings.Contains(err.Error(), "empty string") {
		t.Errorf("empty-matching pattern: %v", err)
	}
	if res, err := ParseRedactPatterns([]string{`a+`, `b`}); err != nil || len(res) != 2 {
		t.Errorf("good patterns: %v %v", res, err)
	}
}

func mustPatterns(t *testing.T, exprs ...string) []*regexp.Regexp {
	t.Helper()
	res, err := ParseRedactPatterns(exprs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
