package sockmix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Blob is 16 KiB of metadata (and of checkpoint), the most the service
// takes.
var Blob = `{"blob":"` + strings.Repeat("x", 16<<10-12) + `"}`

// SeedBig makes lease name held by the caller of header (holder "owner")
// with 16 KiB of metadata and of checkpoint: a lease_held error about it
// carries 33 KB.
func SeedBig(ctx context.Context, base string, header http.Header, name string) error {
	post := func(path, body string) (map[string]any, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header = header.Clone()
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: %d %v %v", path, resp.StatusCode, m, err)
		}
		return m, nil
	}
	l, err := post("/v1/leases/"+name+":acquire", `{"holder":"owner","ttlMs":3600000,"metadata":`+Blob+`}`)
	if err != nil {
		return err
	}
	_, err = post("/v1/leases/"+name+":renew", fmt.Sprintf(`{"holder":"owner","ttlMs":3600000,"fencingToken":%v,"metadata":%s,"checkpoint":%s}`, l["fencingToken"], Blob, Blob))
	return err
}

// RefusedError is OpenSocket's error when the instance refused the
// socket: its upgrade was answered with a status other than 101, or its
// open with an error.
type RefusedError struct {
	// Key is the upgrade's status ("429"), or "open" for an open refused.
	Key string
	// Detail is the library's error or the answer to the open.
	Detail string
}

func (e *RefusedError) Error() string { return "refused (" + e.Key + "): " + e.Detail }

// OpenSocket dials a session socket with header and opens a session.
func OpenSocket(ctx context.Context, base string, header http.Header) (*websocket.Conn, error) {
	c, resp, err := websocket.Dial(ctx, strings.Replace(base, "http", "ws", 1)+"/v1/sessions:connect",
		&websocket.DialOptions{HTTPHeader: header, Subprotocols: []string{Subprotocol}})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, &RefusedError{Key: strconv.Itoa(resp.StatusCode), Detail: err.Error()}
		}
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"open","id":1}`)); err != nil {
		return nil, err
	}
	_, data, err := c.Read(ctx)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(string(data), `"opened"`) {
		_ = c.CloseNow()
		return nil, &RefusedError{Key: "open", Detail: string(data)}
	}
	return c, nil
}

// NonReading is a set of session sockets that, once their session is
// open, ask for answers that carry a large lease and read nothing.
type NonReading struct {
	conns   []*websocket.Conn
	refused map[string]int
	wg      sync.WaitGroup
}

// OpenNonReading opens n session sockets at base, socket i with
// header(i), one after the other; from its open on, each asks rate times
// a second until stop is closed to acquire name as holder "h<i>" (name is held by
// another: the answer is a lease_held error carrying the lease) and
// reads nothing. A socket whose upgrade or open the instance refuses is
// counted (Refused) when refusedOK, an error otherwise; any other
// failure is an error, and closes the sockets opened so far.
func OpenNonReading(ctx context.Context, base string, n int, header func(i int) http.Header, name string, rate int, stop <-chan struct{}, refusedOK bool) (*NonReading, error) {
	nr := &NonReading{refused: map[string]int{}}
	for i := range n {
		c, err := OpenSocket(ctx, base, header(i))
		if re := (*RefusedError)(nil); err != nil && refusedOK && errors.As(err, &re) {
			nr.refused[re.Key]++
			continue
		}
		if err != nil {
			nr.Close()
			return nil, fmt.Errorf("socket %d: %w", i, err)
		}
		nr.conns = append(nr.conns, c)
		nr.wg.Go(func() { // from here nothing is read until Finish
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for id := 2; ; id++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := c.Write(wctx, websocket.MessageText, fmt.Appendf(nil, `{"type":"acquire","id":%d,"name":%q,"holder":"h%d"}`, id, name, i))
				cancel()
				if err != nil {
					return
				}
			}
		})
	}
	return nr, nil
}

// Opened is how many sockets opened a session.
func (nr *NonReading) Opened() int { return len(nr.conns) }

// Refused counts the sockets the instance refused, by upgrade status
// (or "open" when the open was answered with an error).
func (nr *NonReading) Refused() map[string]int { return nr.refused }

// Wait waits until every socket has stopped asking (at stop, or when a
// write has not gone through in 2 s).
func (nr *NonReading) Wait() { nr.wg.Wait() }

// Finish reads what each socket was sent, for up to readFor, and counts
// the sockets by how they ended: the instance's close status, "dropped"
// (the connection ended without one), or "open" (still open then).
func (nr *NonReading) Finish(ctx context.Context, readFor time.Duration) map[string]int {
	codes := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range nr.conns {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, readFor)
			defer cancel()
			c.SetReadLimit(1 << 20)
			for {
				if _, _, err := c.Read(rctx); err != nil {
					key := "open"
					if st := websocket.CloseStatus(err); st != -1 {
						key = strconv.Itoa(int(st))
					} else if rctx.Err() == nil {
						key = "dropped"
					}
					mu.Lock()
					codes[key]++
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return codes
}

// Close closes the sockets from this end.
func (nr *NonReading) Close() {
	for _, c := range nr.conns {
		_ = c.CloseNow()
	}
}

// Counts renders counts as "10×1013, 2×open", by key, joined by sep.
func Counts(m map[string]int, sep string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d×%s", m[k], k))
	}
	return strings.Join(parts, sep)
}
