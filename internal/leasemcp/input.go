package leasemcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The range of a tool's ttlSeconds: the service's default limits
// (docs/contract.md §9). A service configured with narrower ones
// (LEASESVC_MIN_TTL, LEASESVC_MAX_TTL) refuses the rest itself.
const (
	minTTL = time.Second
	maxTTL = time.Hour
)

// patternWords says in plain words what a schema pattern accepts.
var patternWords = map[string]string{
	namePattern: "1–128 characters of letters, digits, '.', '_' and '-', starting with a letter or digit",
}

// inputCheck checks a tool's arguments against its input schema, one
// argument at a time, so that a refusal names the argument and says what it
// accepts in plain words: the schema checker's own text ("validating
// /properties/ttlSeconds: minimum: 0 < 1") is written for a schema's
// author, not for the agent that called the tool. The schema's validator
// decides; inputCheck only words the answer.
type inputCheck struct {
	tool     string
	props    map[string]*argument
	names    []string // the arguments, sorted
	required []string
}

// argument is one property of a tool's input schema.
type argument struct {
	name     string
	schema   *jsonschema.Schema
	resolved *jsonschema.Resolved
	items    *jsonschema.Resolved // an array's items, checked one by one
}

// newInputCheck prepares the check of the arguments of tool against sc.
func newInputCheck(tool string, sc *jsonschema.Schema) (*inputCheck, error) {
	c := &inputCheck{tool: tool, props: map[string]*argument{}, required: sc.Required}
	for name, p := range sc.Properties {
		r, err := p.CloneSchemas().Resolve(nil)
		if err != nil {
			return nil, fmt.Errorf("argument %s: %w", name, err)
		}
		a := &argument{name: name, schema: p, resolved: r}
		if p.Items != nil {
			if a.items, err = p.Items.CloneSchemas().Resolve(nil); err != nil {
				return nil, fmt.Errorf("argument %s's items: %w", name, err)
			}
		}
		c.props[name] = a
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)
	return c, nil
}

// check returns a plain-words error for the first argument in raw that
// the schema refuses (in name order), or nil.
func (c *inputCheck) check(raw json.RawMessage) error {
	args := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &args); err != nil {
			return fmt.Errorf("the arguments of %s must be a JSON object of named arguments", c.tool)
		}
	}
	for _, name := range c.required {
		if _, ok := args[name]; !ok {
			return fmt.Errorf("%s is required: give %s", name, c.props[name].words())
		}
	}
	given := make([]string, 0, len(args))
	for name := range args {
		given = append(given, name)
	}
	slices.Sort(given)
	for _, name := range given {
		a := c.props[name]
		if a == nil {
			if len(c.names) == 0 {
				return fmt.Errorf("unknown argument %q: %s takes no arguments", name, c.tool)
			}
			return fmt.Errorf("unknown argument %q: %s takes %s", name, c.tool, strings.Join(c.names, ", "))
		}
		if err := a.check(args[name]); err != nil {
			return err
		}
	}
	return nil
}

// check checks one argument's value.
func (a *argument) check(raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("%s must be %s", a.name, a.words())
	}
	if a.items != nil {
		if list, ok := v.([]any); ok {
			if a.schema.MaxItems != nil && len(list) > *a.schema.MaxItems {
				return fmt.Errorf("%s must list at most %d items; you gave %d", a.name, *a.schema.MaxItems, len(list))
			}
			for i, item := range list {
				if a.items.Validate(item) != nil {
					return fmt.Errorf("%s[%d] must be %s; you gave %s", a.name, i, describe(a.schema.Items), shown(item))
				}
			}
		}
	}
	if a.resolved.Validate(v) != nil {
		return fmt.Errorf("%s must be %s; you gave %s", a.name, a.words(), shown(v))
	}
	return nil
}

// words says what the argument accepts.
func (a *argument) words() string {
	if a == nil {
		return "a value"
	}
	return describe(a.schema)
}

// describe says in plain words what sc accepts.
func describe(sc *jsonschema.Schema) string {
	typ := sc.Type
	for _, t := range sc.Types {
		if t != "null" {
			typ = t
		}
	}
	switch typ {
	case "number", "integer":
		what := "a number"
		if typ == "integer" {
			what = "a whole number"
		}
		switch {
		case sc.Minimum != nil && sc.Maximum != nil:
			return fmt.Sprintf("%s between %s and %s", what, num(*sc.Minimum), num(*sc.Maximum))
		case sc.Minimum != nil:
			return fmt.Sprintf("%s of at least %s", what, num(*sc.Minimum))
		case sc.Maximum != nil:
			return fmt.Sprintf("%s of at most %s", what, num(*sc.Maximum))
		}
		return what
	case "string":
		if w, ok := patternWords[sc.Pattern]; ok {
			return "a string of " + w
		}
		return "a string"
	case "boolean":
		return "true or false"
	case "object":
		return "a JSON object"
	case "array":
		what := "a list"
		if sc.MaxItems != nil {
			what += fmt.Sprintf(" of at most %d items", *sc.MaxItems)
		}
		if sc.Items != nil {
			what += ", each " + describe(sc.Items)
		}
		return what
	}
	return "a valid value"
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// shown renders a refused value for an error, cut short.
func shown(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "a value that is not JSON"
	}
	if len(b) > 80 {
		return string(b[:77]) + "…"
	}
	return string(b)
}

// addTool registers a tool whose arguments are checked, before the schema
// checker of the MCP library sees them, by an inputCheck of its input
// schema (see checkInputs).
func addTool[In, Out any](s *Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	sc, ok := t.InputSchema.(*jsonschema.Schema)
	if !ok {
		sc = schema[In](func(map[string]*jsonschema.Schema) {})
		t.InputSchema = sc
	}
	c, err := newInputCheck(t.Name, sc)
	if err != nil {
		panic(fmt.Sprintf("leasemcp: input schema of %s: %v", t.Name, err)) // a programming error, found by every test
	}
	s.inputs[t.Name] = c
	if t.OutputSchema == nil {
		t.OutputSchema = bare(schema[Out](func(map[string]*jsonschema.Schema) {}))
	}
	mcp.AddTool(s.srv, t, h)
}

// bare drops the descriptions from an output schema, in place, and returns
// it. A result's shape is what a client checks it against; what its members
// mean is in the tool's description and the result's instructions, and
// repeating it in every schema made tools/list some 30 KB (issue 38).
func bare(sc *jsonschema.Schema) *jsonschema.Schema {
	if sc == nil {
		return nil
	}
	sc.Description = ""
	if f := sc.AdditionalProperties; f != nil && f.Not != nil {
		sc.AdditionalProperties = nil // false: our own results have no other members
	}
	for _, p := range sc.Properties {
		bare(p)
	}
	bare(sc.Items)
	return sc
}

// checkInputs is a receiving middleware that answers a tools/call whose
// arguments its tool's inputCheck refuses with a tool error in plain
// words (with the pending losses and yield requests, as every tool error).
func (s *Server) checkInputs(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if r, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" && r.Params != nil {
			if c := s.inputs[r.Params.Name]; c != nil {
				if err := c.check(r.Params.Arguments); err != nil {
					res := &mcp.CallToolResult{}
					res.SetError(s.fail(err))
					return res, nil
				}
			}
		}
		return next(ctx, method, req)
	}
}
