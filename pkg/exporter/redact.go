package exporter

import (
	"fmt"
	"regexp"
	"sync/atomic"

	"github.com/reconscope/reconscope/pkg/span"
)

// Redacted replaces each part of an error message that a redaction pattern matched.
const Redacted = "[redacted]"

// RedactOptions configures NewRedactor: what of a reconcile's error message may leave the
// agent. Error messages are the one free text a span carries (SECURITY.md): they may quote an
// object's fields, a URL with a token, a user's input.
type RedactOptions struct {
	// DropErrorMessages removes every error message; the error's Go type and the result stay.
	DropErrorMessages bool
	// Patterns: every match in an error message is replaced by Redacted.
	Patterns []*regexp.Regexp
}

// Enabled says whether the options change anything.
func (o RedactOptions) Enabled() bool { return o.DropErrorMessages || len(o.Patterns) > 0 }

// ParseRedactPatterns compiles redaction patterns (Go regular expressions, RE2 syntax).
func ParseRedactPatterns(exprs []string) ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	for _, e := range exprs {
		re, err := regexp.Compile(e)
		if err != nil {
			return nil, fmt.Errorf("redaction pattern %q: %w", e, err)
		}
		if re.MatchString("") {
			return nil, fmt.Errorf("redaction pattern %q matches the empty string: it would redact between every character", e)
		}
		out = append(out, re)
	}
	return out, nil
}

// Redactor removes or redacts error messages before the spans reach the writers after it.
// Put it first, so that no output — standard output, OTLP, metrics — sees the original. It
// implements Writer.
type Redactor struct {
	next     Writer
	opts     RedactOptions
	redacted atomic.Uint64
}

// NewRedactor returns a Redactor writing to next.
func NewRedactor(opts RedactOptions, next Writer) *Redactor {
	return &Redactor{next: next, opts: opts}
}

// Write implements Writer. It changes s.Error in place.
func (r *Redactor) Write(s *span.Span) error {
	if s.Error != "" {
		msg := s.Error
		if r.opts.DropErrorMessages {
			msg = ""
		} else {
			for _, re := range r.opts.Patterns {
				msg = re.ReplaceAllLiteralString(msg, Redacted)
			}
		}
		if msg != s.Error {
			s.Error = msg
			r.redacted.Add(1)
		}
	}
	return r.next.Write(s)
}

// RedactedMessages counts the error messages the Redactor dropped or changed.
func (r *Redactor) RedactedMessages() uint64 { return r.redacted.Load() }
