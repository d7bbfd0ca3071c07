package leasemcp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxLine is the default bound of one line a LineTransport reads:
// 4 MiB, far above any request of the lease tools (a lease_claim_next of
// 1000 names is about 135 KB).
const DefaultMaxLine = 4 << 20

// LineTransport is an mcp.Transport of newline-delimited JSON-RPC over a
// reader and a writer: stdin and stdout for `leasectl mcp`. Unlike the MCP
// library's StdioTransport, whose connection ends at the first line it
// cannot decode (and with it the session, which releases every lease
// held), it survives its client's mistakes:
//
//   - A line that is not a JSON-RPC message is answered on Out with a
//     JSON-RPC error (see decodeLine for the rules: -32700 for invalid
//     JSON or UTF-8, -32600 for a batch, a non-object, a wrong member, an
//     id that is not a string or an integer within ±(2^53−1)), and the
//     next line is read.
//   - A line of more than MaxLine bytes is answered with -32600 (id null)
//     and skipped to its newline without being buffered: the memory held
//     for reading is at most MaxLine plus a 64 KiB buffer.
//   - Lines of whitespace only are skipped; a final line without its
//     newline is read at EOF.
//
// The connection ends only at EOF of In (Read returns io.EOF), at a read
// error of In or a write error of Out (Read returns it, wrapped), or when
// the MCP library closes it. The answers to malformed lines and the
// library's messages are written one at a time, each a line.
type LineTransport struct {
	// In is read for the client's messages; if it is an io.Closer it is
	// closed with the connection.
	In io.Reader
	// Out receives the server's messages, one line each.
	Out io.Writer
	// MaxLine bounds one line read from In, in bytes (its newline
	// excluded). Default DefaultMaxLine.
	MaxLine int
	// Logger receives a warning for each line refused (at most ten, then
	// one in a thousand with their count). Default: no logging.
	Logger *slog.Logger
}

var _ mcp.Transport = (*LineTransport)(nil)

// Connect starts reading In. It is called once, by mcp.Server.Connect.
func (t *LineTransport) Connect(context.Context) (mcp.Connection, error) {
	if t.In == nil || t.Out == nil {
		return nil, errors.New("leasemcp.LineTransport: In and Out must be set")
	}
	if t.MaxLine < 0 {
		return nil, fmt.Errorf("leasemcp.LineTransport: MaxLine %d must not be negative", t.MaxLine)
	}
	c := &lineConn{in: t.In, out: t.Out, limit: t.MaxLine, log: t.Logger,
		incoming: make(chan msgOrErr), closed: make(chan struct{})}
	if c.limit == 0 {
		c.limit = DefaultMaxLine
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	go c.readLoop()
	return c, nil
}

// lineConn is the mcp.Connection of a LineTransport.
type lineConn struct {
	in    io.Reader
	out   io.Writer
	limit int
	log   *slog.Logger

	wmu      sync.Mutex // one write at a time: the library's and the refusals
	writeErr error      // the first write error; later writes fail with it

	incoming  chan msgOrErr // from readLoop; its last item carries an error
	closed    chan struct{}
	closeOnce sync.Once
	refused   int // lines refused so far; readLoop only
}

type msgOrErr struct {
	msg jsonrpc.Message
	err error
}

// SessionID implements mcp.Connection: stdio has no session id.
func (c *lineConn) SessionID() string { return "" }

// Read returns the next message of In: io.EOF at its end, or the error
// that broke the connection.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	case v := <-c.incoming:
		return v.msg, v.err
	}
}

// Write writes msg as one line of Out.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("leasemcp: encoding a message: %w", err)
	}
	return c.writeLine(b)
}

// writeLine writes b and a newline, after any write in progress.
func (c *lineConn) writeLine(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.writeErr != nil {
		return c.writeErr
	}
	if _, err := c.out.Write(append(b, '\n')); err != nil {
		c.writeErr = fmt.Errorf("writing stdout: %w", err)
		return c.writeErr
	}
	return nil
}

// Close ends the connection: Read returns io.EOF, and In is closed if it
// can be (a read blocked in it may stay blocked until the process ends).
func (c *lineConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		if cl, ok := c.in.(io.Closer); ok {
			err = cl.Close()
		}
	})
	return err
}

// readLoop reads In line by line until it ends, passing messages to Read
// and answering malformed lines itself.
func (c *lineConn) readLoop() {
	br := bufio.NewReaderSize(c.in, 64<<10)
	var buf []byte
	for {
		line, size, err := readLine(br, buf[:0], c.limit)
		if line != nil && cap(line) <= 1<<20 {
			buf = line // reuse a small buffer; let a big one go
		}
		var m msgOrErr
		switch {
		case size > int64(c.limit):
			m.err = c.refuse(invalidRequest(nil, "a line of %d bytes is longer than the limit of %d bytes "+
				"(leasectl mcp --max-line, LEASESVC_MCP_MAX_LINE)", size, c.limit), size)
		case len(bytes.TrimSpace(line)) > 0:
			var r *refusal
			if m.msg, r = decodeLine(line); r != nil {
				m.err = c.refuse(r, size)
			}
		}
		if (m.msg != nil || m.err != nil) && !c.deliver(m) {
			return
		}
		if m.err != nil {
			return
		}
		if err != nil {
			// The end of In, after its last line: EOF is a normal end.
			if !errors.Is(err, io.EOF) {
				err = fmt.Errorf("reading stdin: %w", err)
			}
			c.deliver(msgOrErr{err: err})
			return
		}
	}
}

// deliver hands m to Read; false if the connection closed first.
func (c *lineConn) deliver(m msgOrErr) bool {
	select {
	case c.incoming <- m:
		return true
	case <-c.closed:
		return false
	}
}

// readLine reads the next line of br into buf, without its newline and a
// carriage return before it. size is the line's length; when it is more
// than limit, the rest of the line was discarded as it came, never
// buffered, and line is nil. err is br's error at the line's end (io.EOF
// after a last line without a newline, or at the end).
func readLine(br *bufio.Reader, buf []byte, limit int) (line []byte, size int64, err error) {
	over := false
	var last [2]byte // the last two bytes read, for the size of a long line
	for {
		frag, err := br.ReadSlice('\n')
		size += int64(len(frag))
		if !over && len(buf)+len(frag) > limit+2 { // room for "\r\n"
			over, buf = true, nil
		}
		if !over {
			if cap(buf)-len(buf) < len(frag) { // grow, but never past limit+2
				grown := make([]byte, len(buf), min(limit+2, 2*cap(buf)+len(frag)))
				copy(grown, buf)
				buf = grown
			}
			buf = append(buf, frag...)
		}
		for _, b := range frag[max(0, len(frag)-2):] {
			last = [2]byte{last[1], b}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if over {
			switch {
			case last == [2]byte{'\r', '\n'}:
				size -= 2
			case last[1] == '\n':
				size--
			}
			return nil, size, err
		}
		line = bytes.TrimSuffix(buf, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) > limit {
			return nil, int64(len(line)), err
		}
		return line, int64(len(line)), err
	}
}

// refuse writes the answer to a malformed line; the error is a write
// failure, which ends the connection.
func (c *lineConn) refuse(r *refusal, size int64) error {
	c.refused++
	if c.refused <= 10 || c.refused%1000 == 0 {
		c.log.Warn("leasectl mcp: refused a malformed JSON-RPC line", "code", r.code, "reason", r.msg,
			"bytes", size, "refusedSoFar", c.refused)
	}
	return c.writeLine(r.encode())
}
