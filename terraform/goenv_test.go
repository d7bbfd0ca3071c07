package terraform_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// This file finds what the service reads from its environment by parsing its
// Go sources: the non-test files of cmd/leasesvc and of every package of this
// module it imports, transitively (build constraints are ignored, so a file
// for another platform counts too).
//
// A variable counts as read when its name is the argument of a call to a
// function named getenv, Getenv, LookupEnv or lookupEnv (os.Getenv, the
// getenv func that run() receives, …), or of a helper that passes one of its
// string parameters on to such a call (config.go's envDur("LEASESVC_MIN_TTL",
// …), store_spanner.go's spannerEnvBool(getenv, "LEASESVC_SPANNER_MIGRATE",
// …)), found to any depth. The argument may be a string literal, a string
// constant of the scanned packages, or a + concatenation of those.

// envReaders are the function names whose first argument is a variable name.
var envReaders = []string{"getenv", "Getenv", "LookupEnv", "lookupEnv"}

// goSources is the parsed Go code of the service.
type goSources struct {
	root  string // repository root
	fset  *token.FileSet
	files []*ast.File
}

// loadServiceSources parses cmd/leasesvc and the module packages it imports.
func loadServiceSources(t *testing.T, root string) *goSources {
	t.Helper()
	modPath := modulePath(t, root)
	s := &goSources{root: root, fset: token.NewFileSet()}
	queue := []string{modPath + "/cmd/leasesvc"}
	seen := map[string]bool{queue[0]: true}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		dir := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(pkg, modPath)))
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("package %s: %v", pkg, err)
		}
		n := 0
		for _, ent := range entries {
			name := ent.Name()
			if ent.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(s.fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse the service's sources: %v", err)
			}
			n++
			s.files = append(s.files, f)
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if (path == modPath || strings.HasPrefix(path, modPath+"/")) && !seen[path] {
					seen[path] = true
					queue = append(queue, path)
				}
			}
		}
		if n == 0 {
			t.Fatalf("package %s (%s) has no non-test Go files", pkg, dir)
		}
	}
	return s
}

// modulePath reads the module path from go.mod.
func modulePath(t *testing.T, root string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	t.Fatalf("%s/go.mod: no module line", root)
	return ""
}

// pos formats a position relative to the repository root.
func (s *goSources) pos(p token.Pos) string {
	position := s.fset.Position(p)
	if rel, err := filepath.Rel(s.root, position.Filename); err == nil {
		position.Filename = filepath.ToSlash(rel)
	}
	return fmt.Sprintf("%s:%d", position.Filename, position.Line)
}

// envReads returns every variable the service reads, each with where it is
// read, and the calls whose variable name the scan could not work out.
func (s *goSources) envReads() (reads map[string][]string, unresolved []string) {
	consts := s.stringConsts()
	readers := map[string]int{}
	for _, name := range envReaders {
		readers[name] = 0
	}
	forwarded := map[token.Pos]bool{} // calls inside helpers that pass a parameter on

	// Find helpers until no new one appears: a helper may call a helper.
	for changed := true; changed; {
		changed = false
		s.eachFunc(func(name string, params []string, body *ast.BlockStmt) {
			ast.Inspect(body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				idx, isReader := readers[calleeName(call)]
				if !isReader || idx >= len(call.Args) {
					return true
				}
				arg, ok := call.Args[idx].(*ast.Ident)
				if !ok {
					return true
				}
				if p := slices.Index(params, arg.Name); p >= 0 {
					forwarded[call.Pos()] = true
					if _, known := readers[name]; !known && name != "" {
						readers[name] = p
						changed = true
					}
				}
				return true
			})
		})
	}

	reads = map[string][]string{}
	for _, f := range s.files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			idx, isReader := readers[calleeName(call)]
			if !isReader || idx >= len(call.Args) || forwarded[call.Pos()] {
				return true
			}
			if v, ok := resolveString(call.Args[idx], consts); ok {
				reads[v] = append(reads[v], s.pos(call.Pos()))
			} else {
				unresolved = append(unresolved, s.pos(call.Pos()))
			}
			return true
		})
	}
	return reads, unresolved
}

// stringLiterals returns every string literal of the sources, each with
// where it appears.
func (s *goSources) stringLiterals() map[string][]string {
	out := map[string][]string{}
	for _, f := range s.files {
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil {
					out[v] = append(out[v], s.pos(lit.Pos()))
				}
			}
			return true
		})
	}
	return out
}

// eachFunc calls fn for every function of the sources that has a body and a
// name: declared functions and methods, and function literals assigned to a
// variable. params are the parameter names in order ("" for an unnamed one).
func (s *goSources) eachFunc(fn func(name string, params []string, body *ast.BlockStmt)) {
	paramNames := func(ft *ast.FuncType) []string {
		var names []string
		for _, field := range ft.Params.List {
			if len(field.Names) == 0 {
				names = append(names, "")
			}
			for _, n := range field.Names {
				names = append(names, n.Name)
			}
		}
		return names
	}
	for _, f := range s.files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Body != nil {
					fn(n.Name.Name, paramNames(n.Type), n.Body)
				}
			case *ast.AssignStmt:
				for i, rhs := range n.Rhs {
					if lit, ok := rhs.(*ast.FuncLit); ok && i < len(n.Lhs) {
						if id, ok := n.Lhs[i].(*ast.Ident); ok {
							fn(id.Name, paramNames(lit.Type), lit.Body)
						}
					}
				}
			case *ast.ValueSpec:
				for i, v := range n.Values {
					if lit, ok := v.(*ast.FuncLit); ok && i < len(n.Names) {
						fn(n.Names[i].Name, paramNames(lit.Type), lit.Body)
					}
				}
			}
			return true
		})
	}
}

// stringConsts maps each string constant name of the sources to its values
// (one name may be declared in several packages).
func (s *goSources) stringConsts() map[string][]string {
	out := map[string][]string{}
	for _, f := range s.files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if v, ok := resolveString(vs.Values[i], nil); ok {
							out[name.Name] = append(out[name.Name], v)
						}
					}
				}
			}
		}
	}
	return out
}

// resolveString works out the value of a string expression made of literals,
// constants with one known value, and +.
func resolveString(e ast.Expr, consts map[string][]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		v, err := strconv.Unquote(e.Value)
		return v, err == nil
	case *ast.ParenExpr:
		return resolveString(e.X, consts)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		x, ok1 := resolveString(e.X, consts)
		y, ok2 := resolveString(e.Y, consts)
		return x + y, ok1 && ok2
	case *ast.Ident:
		if vs := consts[e.Name]; len(vs) == 1 {
			return vs[0], true
		}
	case *ast.SelectorExpr:
		if vs := consts[e.Sel.Name]; len(vs) == 1 {
			return vs[0], true
		}
	}
	return "", false
}

// calleeName is the name a call is made through: f(…) → f, x.f(…) → f.
func calleeName(call *ast.CallExpr) string {
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		return fn.Name
	case *ast.SelectorExpr:
		return fn.Sel.Name
	}
	return ""
}
