package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/leasesvc/leasesvc/lease"
)

// body is a request's JSON object, read field by field so that every bad
// field is reported, not only the first.
type body struct {
	fields map[string]json.RawMessage
	bad    []lease.FieldViolation
}

// readBody reads r's body as one JSON object. It answers 415 for a
// Content-Type other than application/json, a missing one included, 413
// for a body over MaxBodyBytes and 400 for anything that is not exactly one
// JSON object. Every request that changes state has a body read here, so
// none can come from an HTML form or a no-cors fetch, which cannot send
// application/json (docs/security.md "Cross-site requests").
func readBody(w http.ResponseWriter, r *http.Request) (*body, *problem) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil, &problem{status: http.StatusUnsupportedMediaType, code: codeUnsupportedMediaType,
			detail: "Content-Type: application/json is required"}
	}
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return nil, &problem{status: http.StatusUnsupportedMediaType, code: codeUnsupportedMediaType,
			detail: "Content-Type must be application/json, got " + strconv.Quote(ct)}
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &problem{status: http.StatusRequestEntityTooLarge, code: codePayloadTooLarge,
				detail: "the body is larger than " + strconv.Itoa(MaxBodyBytes) + " bytes"}
		}
		if timedOut(err) {
			w.Header().Set("Connection", "close")
			return nil, &problem{status: http.StatusRequestTimeout, code: codeRequestTimeout,
				detail: "the body did not arrive in time"}
		}
		return nil, &problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the body could not be read",
			violations: []lease.FieldViolation{{Field: "body", Description: "could not be read"}}}
	}
	b := &body{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch err := dec.Decode(&b.fields); {
	case err == io.EOF:
		b.fail("body", "is required: a JSON object")
	case errors.As(err, &syntax):
		b.fail("body", "is not valid JSON at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typ), err == nil && b.fields == nil:
		b.fail("body", "must be a JSON object")
	case err != nil:
		b.fail("body", "is not valid JSON: %v", err)
	default:
		if _, err := dec.Token(); err != io.EOF {
			b.fail("body", "has data after the JSON object")
		} else {
			strict(raw, b)
		}
	}
	if len(b.bad) > 0 {
		return nil, b.problem()
	}
	return b, nil
}

// strict reports what encoding/json lets pass in a syntactically valid
// body: a string (or key) that is not valid UTF-8, which it would silently
// turn into U+FFFD (so "agent-\xff" and "agent-\xfe" would be one holder),
// a \u escape of a lone surrogate, which it turns into U+FFFD too, and an
// object that repeats a key, of which it would keep the last. The field is
// named by its path, such as metadata.k.
func strict(raw []byte, b *body) {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	for {
		_, err := dec.ReadToken()
		if err == nil {
			continue
		}
		var syn *jsontext.SyntacticError
		if !errors.As(err, &syn) {
			return // io.EOF: the body is clean
		}
		field := fieldPath(syn.JSONPointer)
		switch {
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			b.fail(field, "repeats a key of its object")
		case strings.Contains(syn.Err.Error(), "UTF-8"), strings.Contains(syn.Err.Error(), "surrogate"):
			b.fail(field, "is not valid UTF-8")
		default:
			b.fail(field, "is not valid JSON: %v", syn.Err)
		}
		return
	}
}

// fieldPath renders a JSON pointer as a field path: /metadata/k/0 is
// metadata.k.0, the root is body.
func fieldPath(p jsontext.Pointer) string {
	var parts []string
	for tok := range p.Tokens() {
		parts = append(parts, strings.ToValidUTF8(tok, "\ufffd"))
	}
	if len(parts) == 0 {
		return "body"
	}
	return strings.Join(parts, ".")
}

func (b *body) fail(field, format string, args ...any) {
	b.bad = append(b.bad, lease.FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// merge adds the violations of a semantic check (a lease.Validate… error)
// for the fields that decoding did not already report.
func (b *body) merge(err error) {
	var invalid *lease.InvalidError
	if !errors.As(err, &invalid) {
		return
	}
	for _, v := range invalid.Violations {
		if !slices.ContainsFunc(b.bad, func(x lease.FieldViolation) bool { return x.Field == v.Field }) {
			b.bad = append(b.bad, v)
		}
	}
}

// problem is the 400 that lists every bad field.
func (b *body) problem() *problem {
	return &problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid fields", violations: b.bad}
}

// only reports every field other than the allowed ones, in name order.
func (b *body) only(allowed ...string) {
	var unknown []string
	for k := range b.fields {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		b.fail(k, "is not a field of this request")
	}
}

// str returns a string field; required reports a missing one.
func (b *body) str(name string, required bool) string {
	raw, ok := b.fields[name]
	if !ok {
		if required {
			b.fail(name, "is required")
		}
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || isNull(raw) {
		b.fail(name, "must be a string")
	}
	return s
}

// integer returns an integer field and whether it was present.
func (b *body) integer(name string, required bool) (int64, bool) {
	raw, ok := b.fields[name]
	if !ok {
		if required {
			b.fail(name, "is required")
		}
		return 0, false
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || isNull(raw) {
		b.fail(name, "must be an integer")
		return 0, false
	}
	return n, true
}

// boolean returns a boolean field, false when it is absent.
func (b *body) boolean(name string) bool {
	raw, ok := b.fields[name]
	if !ok {
		return false
	}
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil || isNull(raw) {
		b.fail(name, "must be true or false")
	}
	return v
}

// object returns a field holding a JSON object, or nil when it is absent.
func (b *body) object(name string) json.RawMessage {
	raw, ok := b.fields[name]
	if !ok {
		return nil
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		b.fail(name, "must be a JSON object")
		return nil
	}
	// Compacted here, so that what a request keeps (for a waiting
	// acquire, its whole wait) is the object, not the spaces a caller
	// padded it with (docs/contract.md §16).
	var buf bytes.Buffer
	buf.Grow(min(len(raw), 64<<10))
	if err := json.Compact(&buf, raw); err != nil {
		return raw // the lease layer's check says what is wrong with it
	}
	return bytes.Clone(buf.Bytes())
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// millis converts a count of milliseconds to a Duration, saturating instead
// of overflowing so that an absurd value is reported as out of range.
func millis(n int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case n > limit:
		return math.MaxInt64
	case n < -limit:
		return math.MinInt64
	}
	return time.Duration(n) * time.Millisecond
}
