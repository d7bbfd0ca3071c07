package terraform_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// This file loads a Terraform module with hclparse and evaluates its
// expressions as Terraform would plan them for one set of input variables,
// without a provider: every attribute of a resource, data source or module
// call evaluates to a placeholder string naming it, such as
// "<google_pubsub_topic.events.id>". Inputs, locals, count, for_each and
// dynamic blocks evaluate to their real values, so the tests can see which
// resources, environment variables and grants a configuration produces.
//
// The evaluator knows the Terraform functions listed in newFunctions; an
// expression that calls another one fails the test and names the function.

// module is the parsed top-level content of one Terraform module directory.
type module struct {
	dir       string // absolute path
	blocks    []*hclsyntax.Block
	variables map[string]*hclsyntax.Block
	locals    map[string]*hclsyntax.Attribute
}

// loadModule parses every .tf file of dir (not its subdirectories).
func loadModule(t *testing.T, dir string) *module {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := filepath.Glob(filepath.Join(abs, "*.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("%s: no .tf files", abs)
	}
	m := &module{dir: abs, variables: map[string]*hclsyntax.Block{}, locals: map[string]*hclsyntax.Attribute{}}
	parser := hclparse.NewParser()
	for _, path := range paths {
		f, diags := parser.ParseHCLFile(path)
		if diags.HasErrors() {
			t.Fatalf("parse %s: %s", path, diags.Error())
		}
		body, ok := f.Body.(*hclsyntax.Body)
		if !ok {
			t.Fatalf("parse %s: not native HCL syntax", path)
		}
		if len(body.Attributes) > 0 {
			for name, a := range body.Attributes {
				t.Errorf("%s: top-level attribute %q: Terraform allows only blocks here", a.SrcRange, name)
			}
		}
		for _, b := range body.Blocks {
			m.blocks = append(m.blocks, b)
			switch b.Type {
			case "variable":
				if prev, dup := m.variables[b.Labels[0]]; dup {
					t.Fatalf("%s: variable %q declared again (first at %s)", b.DefRange(), b.Labels[0], prev.DefRange())
				}
				m.variables[b.Labels[0]] = b
			case "locals":
				for name, a := range b.Body.Attributes {
					if prev, dup := m.locals[name]; dup {
						t.Fatalf("%s: local %q defined again (first at %s)", a.SrcRange, name, prev.SrcRange)
					}
					m.locals[name] = a
				}
			}
		}
	}
	return m
}

// blocksOf returns the top-level blocks of one type ("resource", "terraform",
// "module", …) whose first label is label1, or every one when label1 is "".
func (m *module) blocksOf(typ, label1 string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, b := range m.blocks {
		if b.Type == typ && (label1 == "" || (len(b.Labels) > 0 && b.Labels[0] == label1)) {
			out = append(out, b)
		}
	}
	return out
}

// resources returns the resource blocks whose type satisfies match.
func (m *module) resources(match func(typ string) bool) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, b := range m.blocksOf("resource", "") {
		if match(b.Labels[0]) {
			out = append(out, b)
		}
	}
	return out
}

// evaluator evaluates the module's expressions for one set of inputs.
type evaluator struct {
	m         *module
	vars      map[string]cty.Value
	locals    map[string]cty.Value
	localErr  map[string]error
	active    map[string]bool // locals being evaluated, to report cycles
	funcs     map[string]function.Function
	filesRead map[string]bool // absolute, cleaned paths that file() read
}

// evaluate returns an evaluator for the given input variables; a variable
// missing from inputs takes its default, converted to its type constraint.
func (m *module) evaluate(t *testing.T, inputs map[string]cty.Value) *evaluator {
	t.Helper()
	e := &evaluator{
		m: m, vars: map[string]cty.Value{}, locals: map[string]cty.Value{},
		localErr: map[string]error{}, active: map[string]bool{}, filesRead: map[string]bool{},
	}
	e.funcs = newFunctions(m.dir, e.filesRead)
	for name := range inputs {
		if _, ok := m.variables[name]; !ok {
			t.Fatalf("test input %q: the module declares no such variable", name)
		}
	}
	for name, b := range m.variables {
		ty := cty.DynamicPseudoType
		if a, ok := b.Body.Attributes["type"]; ok {
			var diags hcl.Diagnostics
			if ty, diags = typeexpr.TypeConstraint(a.Expr); diags.HasErrors() {
				t.Fatalf("variable %q: type: %s", name, diags.Error())
			}
		}
		v, given := inputs[name]
		if !given {
			a, ok := b.Body.Attributes["default"]
			if !ok {
				t.Fatalf("variable %q has no default and the test gives it no value", name)
			}
			var diags hcl.Diagnostics
			if v, diags = a.Expr.Value(nil); diags.HasErrors() {
				t.Fatalf("variable %q: default: %s", name, diags.Error())
			}
		}
		cv, err := convert.Convert(v, ty)
		if err != nil {
			t.Fatalf("variable %q: value %#v does not convert to %s: %v", name, v, ty.FriendlyName(), err)
		}
		e.vars[name] = cv
	}
	return e
}

// valueErr evaluates expr with the extra variables (count, each, a dynamic
// block's iterator) in scope.
func (e *evaluator) valueErr(expr hcl.Expression, extra map[string]cty.Value) (cty.Value, error) {
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{}, Functions: e.funcs}
	localsUsed := map[string]cty.Value{}
	sym := map[string]*symNode{}
	for _, tr := range expr.Variables() {
		root := tr.RootName()
		if v, ok := extra[root]; ok {
			ctx.Variables[root] = v
			continue
		}
		switch root {
		case "var":
			ctx.Variables["var"] = cty.ObjectVal(e.vars)
		case "local":
			name, ok := attrName(tr, 1)
			if !ok {
				return cty.NilVal, fmt.Errorf("%s: malformed reference to a local value", tr.SourceRange())
			}
			v, err := e.local(name)
			if err != nil {
				return cty.NilVal, err
			}
			localsUsed[name] = v
		case "path":
			ctx.Variables["path"] = cty.ObjectVal(map[string]cty.Value{
				"module": cty.StringVal(e.m.dir), "root": cty.StringVal(e.m.dir), "cwd": cty.StringVal(e.m.dir),
			})
		case "terraform":
			ctx.Variables["terraform"] = cty.ObjectVal(map[string]cty.Value{"workspace": cty.StringVal("default")})
		case "count", "each", "self":
			return cty.NilVal, fmt.Errorf("%s: %s is not available here", tr.SourceRange(), root)
		default: // a resource type, data or module: symbolic
			if sym[root] == nil {
				sym[root] = &symNode{path: root}
			}
			sym[root].add(tr[1:])
		}
	}
	if len(localsUsed) > 0 {
		ctx.Variables["local"] = cty.ObjectVal(localsUsed)
	}
	for root, n := range sym {
		ctx.Variables[root] = n.value()
	}
	v, diags := expr.Value(ctx)
	if diags.HasErrors() {
		return cty.NilVal, diagError(diags)
	}
	return v, nil
}

// value is valueErr that fails the test on an error.
func (e *evaluator) value(t *testing.T, expr hcl.Expression, extra map[string]cty.Value) cty.Value {
	t.Helper()
	v, err := e.valueErr(expr, extra)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// local evaluates a local value once.
func (e *evaluator) local(name string) (cty.Value, error) {
	if v, ok := e.locals[name]; ok {
		return v, nil
	}
	if err, ok := e.localErr[name]; ok {
		return cty.NilVal, err
	}
	a, ok := e.m.locals[name]
	if !ok {
		return cty.NilVal, fmt.Errorf("local.%s is not defined in the module", name)
	}
	if e.active[name] {
		return cty.NilVal, fmt.Errorf("%s: local.%s refers to itself", a.SrcRange, name)
	}
	e.active[name] = true
	v, err := e.valueErr(a.Expr, nil)
	delete(e.active, name)
	if err != nil {
		err = fmt.Errorf("local.%s: %w", name, err)
		e.localErr[name] = err
		return cty.NilVal, err
	}
	e.locals[name] = v
	return v, nil
}

// instance is one instance of a resource, with count.index or each.key and
// each.value in scope.
type instance struct {
	addr  string // google_x.y, google_x.y[0], google_x.y["key"]
	typ   string
	block blockScope
}

// blockScope is a block body with the variables in scope inside it.
type blockScope struct {
	body  *hclsyntax.Body
	extra map[string]cty.Value
}

// instances expands a resource block by its count or for_each, which must be
// known for the inputs.
func (e *evaluator) instances(t *testing.T, b *hclsyntax.Block) []instance {
	t.Helper()
	addr := b.Labels[0] + "." + b.Labels[1]
	if a, ok := b.Body.Attributes["count"]; ok {
		v := e.value(t, a.Expr, nil)
		if !v.IsKnown() || v.IsNull() || v.Type() != cty.Number {
			t.Fatalf("%s: count of %s is not a known number: %#v", a.SrcRange, addr, v)
		}
		n, _ := v.AsBigFloat().Int64()
		out := make([]instance, 0, n)
		for i := range n {
			extra := map[string]cty.Value{"count": cty.ObjectVal(map[string]cty.Value{"index": cty.NumberIntVal(i)})}
			out = append(out, instance{addr: fmt.Sprintf("%s[%d]", addr, i), typ: b.Labels[0], block: blockScope{b.Body, extra}})
		}
		return out
	}
	if a, ok := b.Body.Attributes["for_each"]; ok {
		v := e.value(t, a.Expr, nil)
		var out []instance
		for key, val := range elements(t, a.SrcRange, v) {
			each := cty.ObjectVal(map[string]cty.Value{"key": cty.StringVal(key), "value": val})
			out = append(out, instance{addr: fmt.Sprintf("%s[%q]", addr, key), typ: b.Labels[0], block: blockScope{b.Body, map[string]cty.Value{"each": each}}})
		}
		return out
	}
	return []instance{{addr: addr, typ: b.Labels[0], block: blockScope{b.Body, nil}}}
}

// elements iterates a known for_each value: a map or object by key, a set of
// strings by its strings.
func elements(t *testing.T, rng hcl.Range, v cty.Value) func(func(string, cty.Value) bool) {
	t.Helper()
	if !v.IsWhollyKnown() || v.IsNull() {
		t.Fatalf("%s: for_each is not known for these inputs: %#v", rng, v)
	}
	ty := v.Type()
	return func(yield func(string, cty.Value) bool) {
		switch {
		case ty.IsMapType() || ty.IsObjectType():
			for k, val := range v.AsValueMap() {
				if !yield(k, val) {
					return
				}
			}
		case ty.IsSetType() && ty.ElementType() == cty.String:
			for _, val := range v.AsValueSlice() {
				if !yield(val.AsString(), val) {
					return
				}
			}
		default:
			t.Errorf("%s: for_each must be a map or a set of strings, not %s", rng, ty.FriendlyName())
		}
	}
}

// attr evaluates an attribute of a block; ok is false when it is not set.
func (e *evaluator) attr(t *testing.T, s blockScope, name string) (v cty.Value, ok bool) {
	t.Helper()
	a, ok := s.body.Attributes[name]
	if !ok {
		return cty.NilVal, false
	}
	return e.value(t, a.Expr, s.extra), true
}

// nested returns the nested blocks of one type, with dynamic blocks expanded
// by their for_each.
func (e *evaluator) nested(t *testing.T, s blockScope, typ string) []blockScope {
	t.Helper()
	var out []blockScope
	for _, b := range s.body.Blocks {
		switch {
		case b.Type == typ:
			out = append(out, blockScope{b.Body, s.extra})
		case b.Type == "dynamic" && b.Labels[0] == typ:
			iter := typ
			if a, ok := b.Body.Attributes["iterator"]; ok {
				iter = hcl.ExprAsKeyword(a.Expr)
			}
			fe, ok := b.Body.Attributes["for_each"]
			if !ok {
				t.Fatalf("%s: dynamic %q has no for_each", b.DefRange(), typ)
			}
			var content *hclsyntax.Block
			for _, c := range b.Body.Blocks {
				if c.Type == "content" {
					content = c
				}
			}
			if content == nil {
				t.Fatalf("%s: dynamic %q has no content block", b.DefRange(), typ)
			}
			v := e.value(t, fe.Expr, s.extra)
			if !v.IsWhollyKnown() || v.IsNull() {
				t.Fatalf("%s: for_each of dynamic %q is not known for these inputs: %#v", fe.SrcRange, typ, v)
			}
			it := v.ElementIterator()
			for i := 0; it.Next(); i++ {
				k, val := it.Element()
				if v.Type().IsSetType() {
					k = val
				}
				extra := map[string]cty.Value{}
				for name, x := range s.extra {
					extra[name] = x
				}
				extra[iter] = cty.ObjectVal(map[string]cty.Value{"key": k, "value": val})
				out = append(out, blockScope{content.Body, extra})
			}
		}
	}
	return out
}

// symNode builds the symbolic value of a resource reference: every leaf is a
// string "<address>".
type symNode struct {
	path  string
	attrs map[string]*symNode
	index map[int64]*symNode
}

// add records one traversal below the node.
func (n *symNode) add(steps hcl.Traversal) {
	if len(steps) == 0 {
		return
	}
	switch s := steps[0].(type) {
	case hcl.TraverseAttr:
		if n.attrs == nil {
			n.attrs = map[string]*symNode{}
		}
		c := n.attrs[s.Name]
		if c == nil {
			c = &symNode{path: n.path + "." + s.Name}
			n.attrs[s.Name] = c
		}
		c.add(steps[1:])
	case hcl.TraverseIndex:
		if s.Key.Type() == cty.Number && s.Key.IsKnown() {
			i, _ := s.Key.AsBigFloat().Int64()
			if n.index == nil {
				n.index = map[int64]*symNode{}
			}
			c := n.index[i]
			if c == nil {
				c = &symNode{path: fmt.Sprintf("%s[%d]", n.path, i)}
				n.index[i] = c
			}
			c.add(steps[1:])
		} else if s.Key.Type() == cty.String && s.Key.IsKnown() {
			n.add(append(hcl.Traversal{hcl.TraverseAttr{Name: s.Key.AsString()}}, steps[1:]...))
		}
	}
}

// value is the cty value of the node: an object, a tuple or a placeholder.
func (n *symNode) value() cty.Value {
	switch {
	case n.attrs != nil:
		m := map[string]cty.Value{}
		for k, c := range n.attrs {
			m[k] = c.value()
		}
		return cty.ObjectVal(m)
	case n.index != nil:
		var maxIndex int64
		for i := range n.index {
			maxIndex = max(maxIndex, i)
		}
		elems := make([]cty.Value, maxIndex+1)
		for i := range elems {
			if c, ok := n.index[int64(i)]; ok {
				elems[i] = c.value()
			} else {
				elems[i] = cty.DynamicVal
			}
		}
		return cty.TupleVal(elems)
	}
	return cty.StringVal("<" + n.path + ">")
}

// attrName returns the attribute name at step i of a traversal.
func attrName(tr hcl.Traversal, i int) (string, bool) {
	if len(tr) <= i {
		return "", false
	}
	a, ok := tr[i].(hcl.TraverseAttr)
	return a.Name, ok
}

// diagError turns diagnostics into one error naming each source range.
func diagError(diags hcl.Diagnostics) error {
	var msgs []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		where := ""
		if d.Subject != nil {
			where = d.Subject.String() + ": "
		}
		msgs = append(msgs, where+d.Summary+": "+d.Detail)
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// newFunctions returns the Terraform functions the evaluator knows. file()
// reads relative to dir and records every path it read in filesRead.
func newFunctions(dir string, filesRead map[string]bool) map[string]function.Function {
	fileFunc := function.New(&function.Spec{
		Params: []function.Parameter{{Name: "path", Type: cty.String}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			p := args[0].AsString()
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			p = filepath.Clean(p)
			filesRead[p] = true
			b, err := os.ReadFile(p)
			if err != nil {
				return cty.NilVal, fmt.Errorf("no file exists at %s: %w", p, err)
			}
			return cty.StringVal(string(b)), nil
		},
	})
	boolsFunc := func(all bool) function.Function {
		return function.New(&function.Spec{
			Params: []function.Parameter{{Name: "list", Type: cty.List(cty.Bool)}},
			Type:   function.StaticReturnType(cty.Bool),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				for _, v := range args[0].AsValueSlice() {
					if v.True() != all {
						return cty.BoolVal(!all), nil
					}
				}
				return cty.BoolVal(all), nil
			},
		})
	}
	oneFunc := function.New(&function.Spec{
		Params: []function.Parameter{{Name: "list", Type: cty.DynamicPseudoType}},
		Type: func(args []cty.Value) (cty.Type, error) {
			ty := args[0].Type()
			switch {
			case ty.IsListType() || ty.IsSetType():
				return ty.ElementType(), nil
			case ty.IsTupleType() && len(ty.TupleElementTypes()) == 0:
				return cty.DynamicPseudoType, nil
			case ty.IsTupleType() && len(ty.TupleElementTypes()) == 1:
				return ty.TupleElementTypes()[0], nil
			}
			return cty.NilType, fmt.Errorf("one() wants a list, set or tuple of at most one element, not %s", ty.FriendlyName())
		},
		Impl: func(args []cty.Value, ty cty.Type) (cty.Value, error) {
			switch n := args[0].LengthInt(); n {
			case 0:
				return cty.NullVal(ty), nil
			case 1:
				return args[0].AsValueSlice()[0], nil
			default:
				return cty.NilVal, fmt.Errorf("one() got %d elements", n)
			}
		},
	})
	// Terraform's replace() treats a /…/ substring as a regular expression.
	replaceFunc := function.New(&function.Spec{
		Params: []function.Parameter{{Name: "str", Type: cty.String}, {Name: "substr", Type: cty.String}, {Name: "replace", Type: cty.String}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			sub := args[1].AsString()
			if len(sub) > 1 && strings.HasPrefix(sub, "/") && strings.HasSuffix(sub, "/") {
				return stdlib.RegexReplace(args[0], cty.StringVal(sub[1:len(sub)-1]), args[2])
			}
			return stdlib.Replace(args[0], args[1], args[2])
		},
	})
	// Terraform's length() takes a string too (its length in characters).
	lengthFunc := function.New(&function.Spec{
		Params: []function.Parameter{{Name: "value", Type: cty.DynamicPseudoType, AllowDynamicType: true, AllowUnknown: true}},
		Type:   function.StaticReturnType(cty.Number),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if args[0].Type() == cty.String {
				return stdlib.Strlen(args[0])
			}
			return stdlib.Length(args[0])
		},
	})
	return map[string]function.Function{
		"abs": stdlib.AbsoluteFunc, "alltrue": boolsFunc(true), "anytrue": boolsFunc(false),
		"can": tryfunc.CanFunc, "ceil": stdlib.CeilFunc, "chomp": stdlib.ChompFunc,
		"coalesce": stdlib.CoalesceFunc, "coalescelist": stdlib.CoalesceListFunc, "compact": stdlib.CompactFunc,
		"concat": stdlib.ConcatFunc, "contains": stdlib.ContainsFunc, "distinct": stdlib.DistinctFunc,
		"element": stdlib.ElementFunc, "file": fileFunc, "flatten": stdlib.FlattenFunc, "floor": stdlib.FloorFunc,
		"format": stdlib.FormatFunc, "formatlist": stdlib.FormatListFunc, "join": stdlib.JoinFunc,
		"jsondecode": stdlib.JSONDecodeFunc, "jsonencode": stdlib.JSONEncodeFunc, "keys": stdlib.KeysFunc,
		"length": lengthFunc, "lower": stdlib.LowerFunc, "max": stdlib.MaxFunc, "merge": stdlib.MergeFunc,
		"min": stdlib.MinFunc, "one": oneFunc, "range": stdlib.RangeFunc, "regex": stdlib.RegexFunc,
		"regexall": stdlib.RegexAllFunc, "replace": replaceFunc, "reverse": stdlib.ReverseListFunc,
		"setintersection": stdlib.SetIntersectionFunc, "setunion": stdlib.SetUnionFunc, "slice": stdlib.SliceFunc,
		"sort": stdlib.SortFunc, "split": stdlib.SplitFunc, "substr": stdlib.SubstrFunc, "title": stdlib.TitleFunc,
		"tobool": stdlib.MakeToFunc(cty.Bool), "tolist": stdlib.MakeToFunc(cty.List(cty.DynamicPseudoType)),
		"tomap": stdlib.MakeToFunc(cty.Map(cty.DynamicPseudoType)), "tonumber": stdlib.MakeToFunc(cty.Number),
		"toset": stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)), "tostring": stdlib.MakeToFunc(cty.String),
		"trim": stdlib.TrimFunc, "trimprefix": stdlib.TrimPrefixFunc, "trimspace": stdlib.TrimSpaceFunc,
		"trimsuffix": stdlib.TrimSuffixFunc, "try": tryfunc.TryFunc, "upper": stdlib.UpperFunc,
		"values": stdlib.ValuesFunc, "zipmap": stdlib.ZipmapFunc,
	}
}

// stringsOf returns the strings of a known list, set or tuple of strings, or
// of a single string, sorted.
func stringsOf(t *testing.T, what string, v cty.Value) []string {
	t.Helper()
	if !v.IsWhollyKnown() {
		t.Fatalf("%s is not known: %#v", what, v)
	}
	if v.IsNull() {
		return nil
	}
	if v.Type() == cty.String {
		return []string{v.AsString()}
	}
	if !v.CanIterateElements() {
		t.Fatalf("%s: want strings, got %s", what, v.Type().FriendlyName())
	}
	var out []string
	for _, e := range v.AsValueSlice() {
		if e.Type() != cty.String || e.IsNull() {
			t.Fatalf("%s: want strings, got an element %#v", what, e)
		}
		out = append(out, e.AsString())
	}
	sort.Strings(out)
	return out
}

// str returns a known string value, failing the test otherwise.
func str(t *testing.T, what string, v cty.Value) string {
	t.Helper()
	if !v.IsKnown() || v.IsNull() || v.Type() != cty.String {
		t.Fatalf("%s: want a known string, got %#v", what, v)
	}
	return v.AsString()
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
