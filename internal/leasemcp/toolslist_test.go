package leasemcp_test

import (
	"encoding/json"
	"slices"
	"sort"
	"testing"
)

// maxToolsListBytes bounds the tools/list result, which a client puts in
// the model's context: 30,686 bytes before issue 38 (descriptions repeated
// in every output schema), 14,314 after.
const maxToolsListBytes = 16 << 10

// toolFields are the members of a Tool in the MCP spec.
var toolFields = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons", "_meta"}

// schemaKeywords are the JSON Schema keywords the tools' schemas may use.
var schemaKeywords = []string{"type", "properties", "required", "items", "additionalProperties", "description",
	"pattern", "minimum", "maximum", "maxItems", "minItems", "enum"}

// TestToolsListIsSmallAndStandard (issue 38 item 6): tools/list stays
// small, each tool carries only the spec's members and its schemas only
// JSON Schema keywords, every input argument says what it is, and the
// output schemas give the shape without repeating the descriptions.
func TestToolsListIsSmallAndStandard(t *testing.T) {
	s := offlineSession(t)
	res, err := s.cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tools/list: %d bytes, %d tools", len(b), len(res.Tools))
	if len(b) > maxToolsListBytes {
		t.Errorf("tools/list is %d bytes, more than %d", len(b), maxToolsListBytes)
	}
	var raw struct {
		Tools []map[string]json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, tool := range raw.Tools {
		var name string
		_ = json.Unmarshal(tool["name"], &name)
		for k := range tool {
			if !slices.Contains(toolFields, k) {
				t.Errorf("%s has the member %q, which no MCP Tool has", name, k)
			}
		}
		for _, which := range []string{"inputSchema", "outputSchema"} {
			var sc any
			if err := json.Unmarshal(tool[which], &sc); err != nil {
				t.Fatalf("%s %s: %v", name, which, err)
			}
			for _, k := range keywords(sc, false) {
				if !slices.Contains(schemaKeywords, k) {
					t.Errorf("%s %s uses %q, not a JSON Schema keyword of ours", name, which, k)
				}
				if which == "outputSchema" && k == "description" {
					t.Errorf("%s outputSchema repeats descriptions", name)
				}
			}
		}
		var in struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		}
		_ = json.Unmarshal(tool["inputSchema"], &in)
		for arg, p := range in.Properties {
			if p.Description == "" {
				t.Errorf("%s: argument %s has no description", name, arg)
			}
		}
	}
}

// keywords returns the keys of a schema and its subschemas, sorted; the
// names under "properties" are arguments, not keywords.
func keywords(sc any, inProps bool) []string {
	m, ok := sc.(map[string]any)
	if !ok {
		return nil
	}
	var out []string
	for k, v := range m {
		if !inProps {
			out = append(out, k)
		}
		switch {
		case inProps:
			out = append(out, keywords(v, false)...)
		case k == "properties":
			out = append(out, keywords(v, true)...)
		case k == "items" || k == "additionalProperties":
			out = append(out, keywords(v, false)...)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}
