package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// jsonBufs are the buffers leases and events are encoded into before they
// are written or framed: a page or a stream encodes many leases, and each
// would otherwise leave a growing buffer or two of garbage behind.
var jsonBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooled is the largest buffer given back to jsonBufs.
const maxPooled = 1 << 20

// encoded is JSON in a pooled buffer.
type encoded struct{ buf *bytes.Buffer }

// encodeJSON encodes v as wire.Marshal does (no HTML escaping) into a
// pooled buffer; the caller must call release once done with bytes.
func encodeJSON(v any) (encoded, error) {
	buf := jsonBufs.Get().(*bytes.Buffer)
	buf.Reset()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		encoded{buf}.release()
		return encoded{}, err
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	return encoded{buf}, nil
}

// bytes is the JSON, valid until release.
func (e encoded) bytes() []byte { return e.buf.Bytes() }

// release gives the buffer back.
func (e encoded) release() {
	if e.buf != nil && e.buf.Cap() <= maxPooled {
		jsonBufs.Put(e.buf)
	}
}

// eventFrame is the SSE frame of the change event ev, as SSE event name
// (its type, or history) with id.
func eventFrame(id, name string, ev lease.Event) ([]byte, error) {
	e, err := encodeJSON(wire.FromEvent(ev))
	if err != nil {
		return nil, fmt.Errorf("encode %s event of %q: %w", ev.Type, ev.Lease.Name, err)
	}
	defer e.release()
	return frame(id, name, e.bytes()), nil
}

// leaseFrame is the SSE frame of the lease l as event typ with id.
func leaseFrame(id, typ string, l lease.Lease) []byte {
	e, err := encodeJSON(wire.FromLease(l))
	if err != nil { // cannot happen for a lease
		return frame(id, typ, []byte("null"))
	}
	defer e.release()
	return frame(id, typ, e.bytes())
}
