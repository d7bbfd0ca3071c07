package leasemcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// maxSafeID bounds an integer id: 2^53−1, the largest integer every JSON
// implementation keeps exact (RFC 7493 §2.2), and the largest the MCP
// library carries without rounding (jsonrpc.MakeID takes a float64).
const maxSafeID = 1<<53 - 1

// integerID is an integer id as JSON writes it: no fraction, no exponent.
var integerID = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// refusal is the error answer to a line that is not a JSON-RPC message:
// id is the raw id it answers ("null" where none could be read).
type refusal struct {
	id   json.RawMessage
	code int64
	msg  string
}

var nullID = json.RawMessage("null")

func parseError(format string, args ...any) *refusal {
	return &refusal{id: nullID, code: jsonrpc.CodeParseError, msg: "parse error: " + fmt.Sprintf(format, args...)}
}

func invalidRequest(id json.RawMessage, format string, args ...any) *refusal {
	if id == nil {
		id = nullID
	}
	return &refusal{id: id, code: jsonrpc.CodeInvalidRequest, msg: "invalid request: " + fmt.Sprintf(format, args...)}
}

// encode returns the answer's line, without its newline.
func (r *refusal) encode() []byte {
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpc.Error   `json:"error"`
	}{"2.0", r.id, jsonrpc.Error{Code: r.code, Message: r.msg}})
	if err != nil { // a raw id this package read is valid JSON
		panic(fmt.Sprintf("leasemcp: encoding a refusal: %v", err))
	}
	return b
}

// decodeLine reads one line of the stdio transport (without its newline)
// as a JSON-RPC 2.0 message of MCP: a request or notification, or a
// response to one of the server's requests. It returns the message to
// pass to the MCP library, or the error answer to a line that is none:
//
//   - invalid UTF-8 or invalid JSON (or more than one JSON value): parse
//     error (-32700), id null;
//   - valid JSON that is not a message object: invalid request (-32600) —
//     a batch (MCP 2025-06-18 removed JSON-RPC batching), a number, a
//     string, null, an object without "jsonrpc": "2.0", with a "method"
//     that is not a string, "params" that are neither an object nor an
//     array, neither a method nor a result or error, a request that also
//     carries a result or error, a response with both or neither;
//   - an id that is neither a string nor an integer within ±(2^53−1)
//     written without fraction or exponent (1.5, 1e30, 1.0, -0,
//     2^53, null, true, an object): invalid request, id null, rather
//     than answered under another id.
//
// The answer carries the line's id when one could be read (a string or
// an integer in range), else null. Member names are matched exactly.
func decodeLine(line []byte) (jsonrpc.Message, *refusal) {
	if !utf8.Valid(line) {
		return nil, parseError("the line is not valid UTF-8")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, parseError("not one JSON value: %v (at byte %d)", err, syntax.Offset)
		}
		if bytes.HasPrefix(bytes.TrimLeft(line, " \t\r"), []byte("[")) {
			return nil, invalidRequest(nil, "a JSON array (a batch): MCP since 2025-06-18 takes one message per line, no batches")
		}
		return nil, invalidRequest(nil, "%s is not a JSON-RPC message object", jsonKind(line))
	}
	if m == nil {
		return nil, invalidRequest(nil, "null is not a JSON-RPC message object")
	}

	// 1. The id, first: every later refusal answers under it.
	idRaw, hasID := m["id"]
	var id jsonrpc.ID
	if hasID {
		var r *refusal
		if id, r = decodeID(idRaw); r != nil {
			return nil, r
		}
	} else {
		idRaw = nil
	}
	// 2. The version tag.
	var version string
	if v, ok := m["jsonrpc"]; !ok || json.Unmarshal(v, &version) != nil || version != "2.0" {
		return nil, invalidRequest(idRaw, `"jsonrpc" must be the string "2.0"`)
	}
	_, hasResult := m["result"]
	errRaw, hasError := m["error"]

	// 3. A request or a notification.
	if methodRaw, ok := m["method"]; ok {
		var method string
		if methodRaw[0] != '"' || json.Unmarshal(methodRaw, &method) != nil {
			return nil, invalidRequest(idRaw, `"method" must be a string, not %s`, jsonKind(methodRaw))
		}
		if hasResult || hasError {
			return nil, invalidRequest(idRaw, `a request carries no "result" or "error"`)
		}
		params, ok := m["params"]
		if ok && params[0] != '{' && params[0] != '[' {
			return nil, invalidRequest(idRaw, `"params" must be an object or an array, not %s`, jsonKind(params))
		}
		return &jsonrpc.Request{ID: id, Method: method, Params: params}, nil
	}

	// 4. A response to one of the server's requests.
	switch {
	case !hasResult && !hasError:
		return nil, invalidRequest(idRaw, `no "method": neither a request nor a response`)
	case !hasID:
		return nil, invalidRequest(nil, `a response needs the "id" of the request it answers`)
	case hasResult && hasError:
		return nil, invalidRequest(idRaw, `a response carries "result" or "error", not both`)
	case hasError:
		var e jsonrpc.Error
		var fields map[string]json.RawMessage
		if json.Unmarshal(errRaw, &fields) != nil || fields == nil || json.Unmarshal(errRaw, &e) != nil ||
			fields["code"] == nil || fields["message"] == nil {
			return nil, invalidRequest(idRaw, `"error" must be an object with an integer "code" and a string "message"`)
		}
		return &jsonrpc.Response{ID: id, Error: &e}, nil
	}
	return &jsonrpc.Response{ID: id, Result: m["result"]}, nil
}

// decodeID reads an id: a string, or an integer within ±maxSafeID.
func decodeID(raw json.RawMessage) (jsonrpc.ID, *refusal) {
	const want = "an id must be a string or an integer between -9007199254740991 and 9007199254740991 " +
		"written without fraction or exponent (MCP ids are never null)"
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return jsonrpc.ID{}, invalidRequest(nil, "%s: %v", want, err)
		}
		id, err := jsonrpc.MakeID(s)
		if err != nil {
			return jsonrpc.ID{}, invalidRequest(nil, "%s: %v", want, err)
		}
		return id, nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if !integerID.Match(raw) || string(raw) == "-0" || err != nil || n > maxSafeID || n < -maxSafeID {
			return jsonrpc.ID{}, invalidRequest(nil, "%s; got %.40s", want, raw)
		}
		id, err := jsonrpc.MakeID(float64(n)) // exact: |n| ≤ 2^53−1
		if err != nil {
			return jsonrpc.ID{}, invalidRequest(nil, "%s: %v", want, err)
		}
		return id, nil
	}
	return jsonrpc.ID{}, invalidRequest(nil, "%s; got %s", want, jsonKind(raw))
}

// jsonKind names the kind of a valid JSON value, for an error message.
func jsonKind(v []byte) string {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
