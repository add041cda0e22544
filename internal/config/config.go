// Package config is how tidemark's packages report configuration problems:
// each Validate returns the errors.Join of one *FieldError per problem, named
// by the Go field ("RequestTimeout", "Relay.Brokers"), never by a CLI flag.
// The command that fills the config owns the field-to-flag mapping and words
// the errors for its users (cmd/tidemark).
package config

import (
	"errors"
	"fmt"
	"time"
)

// FieldError is one problem with one field.
type FieldError struct {
	Field   string // Go field path, e.g. "Relay.Brokers"
	Problem string // what is wrong, e.g. "must be positive (got 0s)"
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Problems collects field errors; the zero value is ready to use.
type Problems struct{ errs []error }

// Add records a problem with field.
func (p *Problems) Add(field, format string, args ...any) {
	p.errs = append(p.errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
}

// Positive records a problem unless d > 0.
func (p *Problems) Positive(field string, d time.Duration) {
	if d <= 0 {
		p.Add(field, "must be positive (got %s)", d)
	}
}

// Nested records the field errors of a sub-config under prefix ("Relay"):
// its "Brokers" becomes "Relay.Brokers". Other errors are kept as they are.
func (p *Problems) Nested(prefix string, err error) {
	for _, e := range flatten(err) {
		var fe *FieldError
		if errors.As(e, &fe) {
			e = &FieldError{Field: prefix + "." + fe.Field, Problem: fe.Problem}
		}
		p.errs = append(p.errs, e)
	}
}

// Also records the problems of a config embedded in this one, under their
// own field names (the embedded fields are this config's).
func (p *Problems) Also(err error) { p.errs = append(p.errs, flatten(err)...) }

// Err is every problem joined, or nil.
func (p *Problems) Err() error { return errors.Join(p.errs...) }

// Fields returns the field errors in err, looking through errors.Join.
func Fields(err error) []*FieldError {
	var out []*FieldError
	for _, e := range flatten(err) {
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, fe)
		}
	}
	return out
}

func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
