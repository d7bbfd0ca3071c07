package wire

import (
	"bytes"
	"encoding/json"
)

// Marshal returns the JSON of v as json.Marshal does, but without escaping
// <, > and & as \u003c, \u003e and \u0026. The service's answers and events
// are JSON documents, never HTML, and the escapes make stored metadata and
// checkpoints up to six times larger on the way out; the JSON means the same.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}
