package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// checker walks a YAML (or JSON) document node by node and collects every
// problem as a *FileError, so that a file's errors are all reported at once
// with their positions. Struct decoding would lose the positions.
type checker struct {
	file  string
	lines int     // number of lines in the input, for clamping positions
	errs  []error // all *FileError
}

func newChecker(file string, data []byte) *checker {
	return &checker{file: file, lines: bytes.Count(data, []byte("\n")) + 1}
}

// at records a problem at line:col. The line is clamped to the input: yaml.v3
// puts the end of an input that does not end in a newline on the line after
// the last one.
func (c *checker) at(line, col int, path, format string, args ...any) {
	line = min(max(line, 1), c.lines)
	col = max(col, 1)
	c.errs = append(c.errs, &FileError{File: c.file, Line: line, Column: col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// errorf records a problem at node n.
func (c *checker) errorf(n *yaml.Node, path, format string, args ...any) {
	c.at(n.Line, n.Column, path, format, args...)
}

// err returns the problems found so far, in the order of their positions,
// joined; or nil.
func (c *checker) err() error {
	slices.SortStableFunc(c.errs, func(a, b error) int {
		pa, pb := a.(*FileError), b.(*FileError)
		if pa.Line != pb.Line {
			return pa.Line - pb.Line
		}
		return pa.Column - pb.Column
	})
	return errors.Join(c.errs...)
}

// document returns the root node of the single YAML document in data, or nil
// after recording why there is none: text that is not UTF-8 or has control
// characters, a syntax error, no document, or more than one.
func (c *checker) document(data []byte) (root *yaml.Node) {
	if !c.checkText(data) {
		return nil
	}
	defer func() {
		// yaml.v3 reports syntax errors by panicking internally and
		// recovering; anything else escaping is a parser bug, reported
		// rather than crashing the service at start-up.
		if r := recover(); r != nil {
			c.at(1, 1, "", "invalid YAML: parser failed: %v", r)
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			c.at(1, 1, "", "empty document")
		} else {
			c.syntax(data, err)
		}
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		c.syntax(data, err)
		return nil
	default:
		c.errorf(&next, "", "more than one YAML document (want exactly one)")
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		c.errorf(&doc, "", "empty document")
		return nil
	}
	return doc.Content[0]
}

// checkText reports the first character that is not allowed, with its exact
// position: invalid UTF-8, control characters that YAML rejects, and line
// breaks other than "\n" and "\r\n" (YAML would count them as lines, shifting
// every later position). It returns whether the text is acceptable.
func (c *checker) checkText(data []byte) bool {
	line, col := 1, 1
	data = bytes.TrimPrefix(data, []byte("\uFEFF")) // a UTF-8 byte order mark
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			c.at(line, col, "", "invalid UTF-8 (the file must be UTF-8 text)")
			return false
		case r == '\n':
			line, col = line+1, 1
			i += size
			continue
		case r == '\r':
			if i+1 >= len(data) || data[i+1] != '\n' {
				c.at(line, col, "", "carriage return not followed by a line feed")
				return false
			}
		case r == 0x85 || r == 0x2028 || r == 0x2029:
			c.at(line, col, "", "unsupported line break %U (use \\n)", r)
			return false
		case !yamlPrintable(r):
			c.at(line, col, "", "control character %U is not allowed", r)
			return false
		}
		col++
		i += size
	}
	return true
}

// yamlPrintable reports whether YAML accepts r in a document (YAML 1.2 §5.1,
// as checked by yaml.v3's reader).
func yamlPrintable(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' ||
		(r >= 0x20 && r <= 0x7E) || r == 0x85 ||
		(r >= 0xA0 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) ||
		(r >= 0x10000 && r <= unicode.MaxRune)
}

// yamlLine matches yaml.v3's syntax errors: "yaml: line N: problem", or
// "yaml: problem" when the problem is on the first line.
var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// yamlParserProblems are the problems yaml.v3 reports with a 0-based line
// (its scanner's problems carry a 1-based one).
var yamlParserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found undefined tag handle",
	"found duplicate %YAML directive",
	"found duplicate %TAG directive",
	"found incompatible YAML document",
}

// syntax records a syntax error. yaml.v3 gives only a line, and for some
// problems the line where the enclosing construct starts, so the column is 1.
// A document that looks like JSON (it starts with '{' or '[') gets the exact
// position from encoding/json when that rejects it too.
func (c *checker) syntax(data []byte, err error) {
	if t := bytes.TrimLeft(data, " \t\r\n\uFEFF"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		var v any
		var se *json.SyntaxError
		if jerr := json.Unmarshal(data, &v); errors.As(jerr, &se) {
			off := int(se.Offset) - 1 // the offending byte
			if se.Error() == "unexpected end of JSON input" {
				off = len(data)
			}
			line, col := position(data, off)
			c.at(line, col, "", "invalid JSON: %s", se.Error())
			return
		}
	}
	msg, line := err.Error(), 1
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		msg = m[2]
		if m[1] != "" {
			line, _ = strconv.Atoi(m[1])
			if slices.Contains(yamlParserProblems, msg) {
				line++
			}
		}
	}
	c.at(line, 1, "", "invalid YAML: %s", msg)
}

// position returns the 1-based line and column (in characters) of byte
// offset off in data.
func position(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	before := data[:off]
	start := bytes.LastIndexByte(before, '\n') + 1
	return bytes.Count(before, []byte("\n")) + 1, utf8.RuneCount(before[start:]) + 1
}

// describe names n's kind for messages, e.g. "a list" or "null".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!bool":
			return "a boolean"
		case "!!int", "!!float":
			return "a number"
		case "!!str":
			return "a string"
		case "!!timestamp":
			return "a timestamp"
		case "!!binary":
			return "binary data"
		}
		return "a value tagged " + n.Tag
	}
	return "an unknown node"
}

// usable reports whether n can be read, recording anchors and aliases, which
// these files do not support (they would let one entry silently repeat
// another). A nil n (a missing key, or the value of a node that was not
// usable, both already reported) is not usable.
func (c *checker) usable(n *yaml.Node, path string) bool {
	if n == nil {
		return false
	}
	if n.Kind == yaml.AliasNode {
		c.errorf(n, path, "aliases (*%s) are not supported", n.Value)
		return false
	}
	if n.Anchor != "" {
		c.errorf(n, path, "anchors (&%s) are not supported", n.Anchor)
	}
	return true
}

// fields checks that n is a mapping whose keys are all in allowed, with no
// duplicates and every key in required, and returns the value of each key
// present. It returns nil when n is not a usable mapping.
func (c *checker) fields(n *yaml.Node, path string, allowed, required []string) map[string]*yaml.Node {
	if !c.usable(n, path) {
		return nil
	}
	if n.Kind != yaml.MappingNode || n.Tag != "!!map" {
		c.errorf(n, path, "want a mapping with %s, got %s", keysPhrase(allowed), describe(n))
		return nil
	}
	values := make(map[string]*yaml.Node, len(n.Content)/2)
	keys := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !c.usable(k, path) {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			c.errorf(k, path, "want a string key, got %s", describe(k))
			continue
		}
		if first, dup := keys[k.Value]; dup {
			c.errorf(k, path, "duplicate key %q (first at %d:%d)", k.Value, first.Line, first.Column)
			continue
		}
		keys[k.Value] = k
		if !slices.Contains(allowed, k.Value) {
			c.errorf(k, path, "unknown key %q (want %s)", k.Value, orList(allowed, "or"))
			continue
		}
		values[k.Value] = v
	}
	for _, r := range required {
		if _, ok := keys[r]; !ok {
			c.errorf(n, path, "missing key %q", r)
		}
	}
	return values
}

// list checks that n is a non-empty list and returns its items; one names an
// item for messages ("a grant"). It returns nil after recording a problem.
func (c *checker) list(n *yaml.Node, path, one string) []*yaml.Node {
	if !c.usable(n, path) {
		return nil
	}
	if n.Kind != yaml.SequenceNode || n.Tag != "!!seq" {
		c.errorf(n, path, "want a list, got %s", describe(n))
		return nil
	}
	if len(n.Content) == 0 {
		c.errorf(n, path, "empty list (want at least %s)", one)
		return nil
	}
	return n.Content
}

// str checks that n is a scalar to be read as text and returns its text,
// exactly as written. Numbers and timestamps are accepted (a lease prefix may
// be "2024" or "2024-01-01"); null, booleans, binary and custom tags are not.
func (c *checker) str(n *yaml.Node, path string) (string, bool) {
	if !c.usable(n, path) {
		return "", false
	}
	if n.Kind == yaml.ScalarNode {
		switch n.Tag {
		case "!!str", "!!int", "!!float", "!!timestamp":
			return n.Value, true
		case "!!null", "!!bool":
			c.errorf(n, path, "want a string, got %s (quote it if you mean the text %q)", describe(n), n.Value)
			return "", false
		}
	}
	c.errorf(n, path, "want a string, got %s", describe(n))
	return "", false
}

// keysPhrase says which keys a mapping may have, for messages.
func keysPhrase(keys []string) string {
	if len(keys) == 1 {
		return "the key " + strconv.Quote(keys[0])
	}
	return "keys " + orList(keys, "and")
}

// orList formats words as `"a", "b" or "c"`.
func orList(words []string, conj string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = strconv.Quote(w)
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " " + conj + " " + q[len(q)-1]
}

// badText returns what is wrong with s as an identifier-like value (a
// principal or a token): "" if nothing.
func badText(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsSpace(r) {
			return "contains whitespace"
		}
		if unicode.IsControl(r) || !unicode.IsPrint(r) {
			return fmt.Sprintf("contains the non-printable character %U", r)
		}
	}
	return ""
}
