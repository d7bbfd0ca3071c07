package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/internal/overload"
	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// parseMessage reads one message as a JSON object, with the strictness of
// a request body (readBody).
func parseMessage(raw []byte) (*body, *problem) {
	b := &body{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&b.fields); err != nil || b.fields == nil {
		p := protocolError("a message must be one JSON object")
		return nil, &p
	}
	if _, err := dec.Token(); err == nil {
		p := protocolError("a message must be one JSON object, with nothing after it")
		return nil, &p
	}
	strict(raw, b)
	if len(b.bad) > 0 {
		p := protocolError("the message is not valid JSON: " + b.bad[0].Field + " " + b.bad[0].Description)
		return nil, &p
	}
	return b, nil
}

// heartbeatPrefix and heartbeatSuffix frame the one form of a heartbeat
// the SDKs send, {"type":"heartbeat","id":N}: read without the general
// parse (a heartbeat is most of what a socket carries).
const (
	heartbeatPrefix = `{"type":"heartbeat","id":`
	heartbeatSuffix = `}`
)

// heartbeatID returns the id of a heartbeat in its canonical form, and
// whether raw is one; any other form goes through parseMessage, whose
// answer it would have had.
func heartbeatID(raw []byte) (int64, bool) {
	digits, ok := bytes.CutPrefix(raw, []byte(heartbeatPrefix))
	if !ok {
		return 0, false
	}
	digits, ok = bytes.CutSuffix(digits, []byte(heartbeatSuffix))
	if !ok || len(digits) == 0 || len(digits) > 16 || digits[0] == '0' {
		return 0, false
	}
	var id int64
	for _, d := range digits {
		if d < '0' || d > '9' {
			return 0, false
		}
		id = id*10 + int64(d-'0')
	}
	return id, id <= lease.MaxToken
}

// ackMessage encodes the ack of heartbeat re, as send would encode
// {"type":"ack","re":re}.
func ackMessage(re int64) []byte {
	b := make([]byte, 0, 40)
	b = append(b, `{"re":`...)
	b = strconv.AppendInt(b, re, 10)
	return append(b, `,"type":"ack"}`...)
}

// handle acts on one message; false ends the socket.
func (c *sessionConn) handle(r *http.Request, raw []byte) bool {
	if id, ok := heartbeatID(raw); ok {
		c.mu.Lock()
		s, last := c.sess, c.lastID
		if s != nil && id > last {
			c.lastID = id
			c.inline = true // the reader writes the ack (flush)
			c.mu.Unlock()
			// The ack is queued under the session's lock, after any lost
			// push queued before it (docs/contract.md §14, S2).
			s.Heartbeat(func() { c.sendEncoded(ackMessage(id)) })
			return true
		}
		c.mu.Unlock() // out of order, or first: the general path says why
	}
	b, p := parseMessage(raw)
	if p != nil {
		c.fatal(websocket.StatusPolicyViolation, *p)
		return false
	}
	typ := b.str("type", true)
	id, hasID := b.integer("id", true)
	c.mu.Lock()
	s, last := c.sess, c.lastID
	if hasID && id > last {
		c.lastID = id
	}
	c.mu.Unlock()
	switch {
	case len(b.bad) > 0:
		c.fatal(websocket.StatusPolicyViolation, protocolError("every message needs a string type and an integer id"))
		return false
	case id < 1 || id <= last:
		c.fatal(websocket.StatusPolicyViolation, protocolError("id "+strconv.FormatInt(id, 10)+" must be a positive integer larger than every earlier id of the socket"))
		return false
	case s == nil && typ != "open" && typ != "resume":
		c.fatal(websocket.StatusPolicyViolation, protocolError("the first message must be open or resume"))
		return false
	case s != nil && (typ == "open" || typ == "resume"):
		c.fatal(websocket.StatusPolicyViolation, protocolError("the socket already carries a session"))
		return false
	}
	switch typ {
	case "open":
		return c.open(r, b, id)
	case "resume":
		return c.resume(r, b, id)
	case "heartbeat":
		b.only("type", "id")
		if len(b.bad) > 0 {
			c.answerError(id, *b.problem())
			return true
		}
		// The ack is queued under the session's lock, after any lost push
		// queued before it (docs/contract.md §14, S2); the reader writes
		// it (flush).
		c.mu.Lock()
		c.inline = true
		c.mu.Unlock()
		s.Heartbeat(func() { c.sendEncoded(ackMessage(id)) })
		return true
	case "close":
		ctx, cancel := context.WithTimeout(c.ctx, c.a.cfg.RequestTimeout)
		defer cancel()
		if err := s.Close(ctx); err != nil && !errors.Is(err, session.ErrClosed) {
			c.answerError(id, c.a.errorProblem(r, err))
		}
		c.send(map[string]any{"type": "closed", "re": id})
		c.shut(websocket.StatusNormalClosure, "closed")
		return false
	case "acquire", "renew", "release", "transfer":
		return c.leaseOp(r, s, typ, id, b)
	}
	c.fatal(websocket.StatusPolicyViolation, protocolError("unknown message type "+strconv.Quote(clip(typ, 32))))
	return false
}

// window reads the optional windowMs of open and resume.
func window(b *body) (time.Duration, bool) {
	ms, has := b.integer("windowMs", false)
	return millis(ms), has
}

// refuseStart answers a refused open or resume and closes the socket (1008).
func (c *sessionConn) refuseStart(r *http.Request, id int64, err error) bool {
	var limit *session.LimitError
	var win *session.WindowError
	var epochErr *session.EpochError
	var p problem
	switch {
	case errors.As(err, &epochErr):
		p = problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid fields",
			violations: []lease.FieldViolation{{Field: "epoch", Description: "must be at most " + strconv.FormatInt(epochErr.Max, 10) + ": a resume proposes one more than every epoch the agent has seen or proposed"}}}
	case errors.As(err, &win):
		p = problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid fields",
			violations: []lease.FieldViolation{{Field: "windowMs", Description: "must be an integer between 200 and 60000"}}}
	case errors.As(err, &limit):
		p = problem{status: http.StatusTooManyRequests, code: codeResourceExhausted, retryAfter: 1, limit: "sessions",
			detail: "too many " + limit.What + " (at most " + strconv.Itoa(limit.Max) + "); retry later"}
	case errors.Is(err, session.ErrNotFound):
		p = problem{status: http.StatusNotFound, code: codeSessionNotFound, detail: "no live session with this id for this caller"}
	case errors.Is(err, session.ErrConflict):
		p = problem{status: http.StatusConflict, code: codeSessionConflict,
			detail: "the session is at this epoch or a later one already: a later resume owns it; resume again with a higher epoch"}
		var ce *session.ConflictError
		if errors.As(err, &ce) {
			p.epoch = ce.Epoch
		}
	case errors.Is(err, session.ErrShuttingDown):
		p = shuttingDown()
	default:
		p = c.a.errorProblem(r, err)
	}
	c.answerError(id, p)
	c.shut(websocket.StatusPolicyViolation, p.detail)
	return false
}

// opened is the answer to open and resume.
func (c *sessionConn) opened(typ string, id int64, s *session.Session, sessionID string) map[string]any {
	m := map[string]any{"type": typ, "re": id, "epoch": s.Epoch(), "windowMs": s.Window().Milliseconds(),
		"heartbeatMs": s.Window().Milliseconds() / 4, "leaseTtlMs": s.TTL().Milliseconds()}
	if sessionID != "" {
		m["sessionId"] = sessionID
	}
	return m
}

func (c *sessionConn) open(r *http.Request, b *body, id int64) bool {
	w, has := window(b)
	b.only("type", "id", "windowMs")
	if len(b.bad) > 0 {
		c.answerError(id, *b.problem())
		c.shut(websocket.StatusPolicyViolation, "invalid open")
		return false
	}
	if !has {
		w = session.DefaultWindow
	}
	if !c.chargeSession(id, "session_open") {
		return false
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.a.cfg.RequestTimeout)
	defer cancel()
	s, sid, err := c.slot.Open(ctx, c.principal, w, c)
	if err != nil {
		return c.refuseStart(r, id, err)
	}
	c.attach(s)
	c.send(c.opened("opened", id, s, sid))
	return true
}

// chargeSession charges what a socket carrying a session costs beyond an
// unopened one, before open or resume (id) acts; a refusal answers id,
// writes the audit line of action and closes the socket (1008), and false
// is returned.
func (c *sessionConn) chargeSession(id int64, action string) bool {
	p := c.charge(sessionCost-socketCost, "session")
	if p == nil {
		return true
	}
	c.a.cfg.Audit.Session(c.ctx, action, p.code, c.principal, "", p.detail)
	c.answerError(id, *p)
	c.shut(websocket.StatusPolicyViolation, p.detail)
	return false
}

// attach makes s the socket's session.
func (c *sessionConn) attach(s *session.Session) {
	c.mu.Lock()
	c.sess = s
	c.mu.Unlock()
}

func (c *sessionConn) resume(r *http.Request, b *body, id int64) bool {
	sid := b.str("sessionId", true)
	w, _ := window(b)
	epoch, hasEpoch := b.integer("epoch", false)
	claims := c.claims(b)
	b.only("type", "id", "sessionId", "epoch", "windowMs", "leases")
	switch {
	case c.v1:
		b.fail("epoch", "required: resumes are ordered by the agent; speak %s (docs/contract.md §14)", SessionSubprotocol)
	case b.fields["epoch"] == nil, hasEpoch && epoch < 1:
		b.fail("epoch", "required: a positive integer, one more than every epoch the agent has seen or proposed for the session")
	case epoch > lease.MaxToken:
		b.fail("epoch", "must be at most %d", int64(lease.MaxToken))
	}
	if len(b.bad) > 0 {
		c.answerError(id, *b.problem())
		c.shut(websocket.StatusPolicyViolation, "invalid resume")
		return false
	}
	if !c.chargeSession(id, "session_resume") {
		return false
	}
	claims, refused := c.grantedClaims(claims)
	ctx, cancel := context.WithTimeout(c.ctx, c.a.cfg.RequestTimeout)
	defer cancel()
	// The resumed answer is queued as the session attaches to this socket,
	// before any push about it (docs/contract.md §14, S6).
	s, _, _, err := c.slot.Resume(ctx, c.principal, sid, epoch, w, claims, c, func(s *session.Session, taken []lease.Lease) func([]lease.Lease, []session.Lost) {
		proofs := make(map[string]wire.Lease, len(taken))
		for _, l := range taken { // a resume may restart a holding: each carries its proof
			proofs[l.Name] = c.a.withProof(c.ctx, l)
		}
		m := c.opened("resumed", id, s, sid) // not under the session's lock: it reads the epoch
		return func(leases []lease.Lease, lost []session.Lost) {
			ls := make([]wire.Lease, 0, len(leases))
			for _, l := range leases {
				ls = append(ls, proofs[l.Name])
			}
			m["leases"] = ls
			lj := make([]map[string]any, 0, len(lost)+len(refused))
			for _, l := range append(lost, refused...) {
				lj = append(lj, map[string]any{"name": l.Name, "fencingToken": l.FencingToken, "reason": l.Reason})
			}
			m["lost"] = lj
			c.send(m)
		}
	})
	if err != nil {
		return c.refuseStart(r, id, err)
	}
	c.attach(s)
	return true
}

// grantedClaims splits a resume's claims by the policy: those the caller
// may acquire are taken over; the others are not touched and are listed
// lost, as a lease that does not exist (deleted) when the caller may not
// read the name either, so that a claim reveals nothing the policy hides,
// and as revoked when it may read but no longer hold it (docs/contract.md
// §14, docs/security.md).
func (c *sessionConn) grantedClaims(claims []session.Claim) (granted []session.Claim, refused []session.Lost) {
	pol := c.a.cfg.Policy
	if pol == nil {
		return claims, nil
	}
	granted = claims[:0:0]
	for _, cl := range claims {
		switch {
		case pol.Allowed(c.principal, auth.Acquire, cl.Name):
			granted = append(granted, cl)
		case pol.Allowed(c.principal, auth.Read, cl.Name):
			refused = append(refused, session.Lost{Name: cl.Name, FencingToken: cl.FencingToken, Reason: session.LostRevoked})
		default:
			refused = append(refused, session.Lost{Name: cl.Name, FencingToken: cl.FencingToken, Reason: session.LostDeleted})
		}
	}
	return granted, refused
}

// claims reads the leases member of resume, reporting bad entries on b.
func (c *sessionConn) claims(b *body) []session.Claim {
	raw, ok := b.fields["leases"]
	if !ok {
		return nil
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		b.fail("leases", "must be an array of {name, holder, fencingToken} objects")
		return nil
	}
	out := make([]session.Claim, 0, len(items))
	seen := map[string]bool{}
	for i, item := range items {
		eb := &body{fields: item}
		cl := session.Claim{Name: eb.str("name", true), Holder: eb.str("holder", true)}
		cl.FencingToken, _ = eb.integer("fencingToken", true)
		eb.only("name", "holder", "fencingToken")
		if len(eb.bad) == 0 {
			eb.merge(lease.ValidateRelease(lease.ReleaseRequest{Name: cl.Name, Holder: cl.Holder, FencingToken: cl.FencingToken}))
		}
		if strings.HasPrefix(cl.Name, session.RecordPrefix) {
			eb.fail("name", "must not begin with %q: the name is reserved for the service", session.RecordPrefix)
		}
		if len(eb.bad) == 0 && seen[cl.Name] {
			eb.fail("name", "repeats an earlier lease of the list")
		}
		for _, v := range eb.bad {
			b.fail("leases."+strconv.Itoa(i)+"."+v.Field, "%s", v.Description)
		}
		seen[cl.Name] = true
		out = append(out, cl)
	}
	return out
}

// validationRef stands for the session in a semantic check: the lease
// layer checks a session write's TTL against the session's bounds, not
// MinTTL and MaxTTL.
var validationRef = &lease.SessionRef{Key: strings.Repeat("0", lease.SessionKeyLen), Epoch: 1, Window: session.DefaultWindow}

// leaseOp decodes and runs acquire, renew, release or transfer on its own
// goroutine (an acquire may wait); the answer carries re. Each takes a
// token of the caller's rate limit first; without one it is answered 429
// and nothing else happens.
func (c *sessionConn) leaseOp(r *http.Request, s *session.Session, typ string, id int64, b *body) bool {
	if p := c.rateLimited(); p != nil { // the bucket of the caller's REST calls
		c.answerError(id, *p)
		return true
	}
	var name string
	var run func(ctx context.Context) (lease.Lease, error)
	var validate func() error
	var wait time.Duration
	switch typ {
	case "acquire":
		req := lease.AcquireRequest{Principal: c.principal, TTL: s.TTL(), Session: validationRef}
		validate = c.a.decodeAcquire(b, &req, fromSocket)
		name, wait = req.Name, req.Wait
		run = func(ctx context.Context) (lease.Lease, error) {
			req.Session = nil
			// The result is queued as the lease enters the session's table,
			// under its lock (docs/contract.md §14, S6): every push about
			// the lease follows it, every ack after it counts the lease.
			return s.Acquire(ctx, req, func(l lease.Lease) func() {
				b, err := wire.Marshal(map[string]any{"type": "result", "re": id, "lease": c.a.withProof(c.ctx, l)})
				if err != nil { // cannot happen: the lease and its proof are plain JSON
					c.a.log.Error("session: encoding a result failed", "err", err)
					return func() {
						c.answerError(id, problem{status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: 1, detail: "the answer could not be encoded; retry"})
					}
				}
				return func() { c.sendEncoded(b) }
			})
		}
	case "renew":
		req := lease.RenewRequest{Principal: c.principal}
		validate = c.a.decodeRenew(b, &req, fromSocket)
		name = req.Name
		run = func(ctx context.Context) (lease.Lease, error) { return s.Renew(ctx, req) }
	case "release":
		req := lease.ReleaseRequest{Principal: c.principal}
		validate = decodeRelease(b, &req, fromSocket)
		name = req.Name
		run = func(ctx context.Context) (lease.Lease, error) { return s.Release(ctx, req) }
	default:
		req := lease.TransferRequest{Principal: c.principal}
		validate = c.a.decodeTransfer(b, &req, fromSocket)
		name = req.Name
		run = func(ctx context.Context) (lease.Lease, error) { return s.Transfer(ctx, req) }
	}
	if strings.HasPrefix(name, session.RecordPrefix) {
		b.fail("name", "must not begin with %q: the name is reserved for the service", session.RecordPrefix)
	} else if lease.Reserved(name) {
		b.fail("name", "must not begin with %q: the name is reserved for the service", lease.KeyRecordPrefix)
	}
	if len(b.bad) > 0 {
		b.merge(validate())
		c.answerError(id, *b.problem())
		return true
	}
	if err := validate(); err != nil {
		c.answerError(id, c.a.errorProblem(r, err))
		return true
	}
	if typ == "acquire" && c.a.cfg.Overload.Level() >= overload.Soft { // new work (docs/contract.md §16)
		p := c.a.overloadProblem("new work is refused")
		c.a.cfg.Overload.Refused("session acquire")
		c.a.cfg.Audit.Overload(c.ctx, "overload_refuse", codeUnavailable, c.principal, "session acquire: "+p.detail)
		c.answerError(id, p)
		return true
	}
	if c.a.cfg.Policy != nil && !c.a.cfg.Policy.Allowed(c.principal, auth.Acquire, name) {
		detail := "the policy does not grant acquire on this name to this caller"
		c.a.cfg.Audit.Refused(c.ctx, typ, codePermissionDenied, c.principal, name, detail)
		c.answerError(id, problem{status: http.StatusForbidden, code: codePermissionDenied, detail: detail})
		return true
	}
	// A waiting acquire takes one of MaxLeases places; any other op one
	// of maxQuickOps, so that the answers being made for a client that
	// does not read stay few (docs/contract.md §14 Limits).
	sem, what := c.inflight, "requests under way on this session"
	if wait == 0 {
		sem, what = c.quick, "requests under way on this socket (at most "+strconv.Itoa(maxQuickOps)+" that do not wait)"
	}
	select {
	case sem <- struct{}{}:
	default:
		c.answerError(id, exhausted(what, 1))
		return true
	}
	var release func()
	if wait > 0 { // a waiting acquire holds a waiting slot, as over REST
		if c.a.stopCtx.Err() != nil {
			<-sem
			c.answerError(id, shuttingDown())
			return true
		}
		var ok bool
		if release, ok = c.a.waiting.take(c.caller); !ok {
			<-sem
			c.answerError(id, exhausted("waiting acquires", 1))
			return true
		}
	}
	c.beginOp()
	go func() {
		defer c.endOp()
		defer func() { <-sem }()
		if release != nil {
			defer release()
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.a.cfg.RequestTimeout+wait)
		defer cancel()
		if wait > 0 { // on shutdown the wait ends at once: 503, retry elsewhere
			wctx, wcancel := context.WithCancelCause(ctx)
			defer wcancel(nil)
			defer context.AfterFunc(c.a.stopCtx, func() { wcancel(errShuttingDown) })()
			defer c.a.shedWait(c.caller, wcancel)() // shed past the soft threshold: 503
			ctx = wctx
		}
		l, err := run(ctx)
		if err != nil && errors.Is(context.Cause(ctx), errShuttingDown) {
			c.answerError(id, shuttingDown())
			return
		}
		if err != nil && errors.Is(context.Cause(ctx), errOverloaded) {
			c.answerError(id, c.a.overloadProblem("the waiting acquire was shed"))
			return
		}
		if err != nil {
			c.answerError(id, c.opProblem(r, err))
			return
		}
		if typ != "acquire" { // an acquire's result was queued with the table (S6)
			c.send(map[string]any{"type": "result", "re": id, "lease": wire.FromLease(l)})
		}
	}()
	return true
}

// opProblem maps a session lease operation's error to its problem.
func (c *sessionConn) opProblem(r *http.Request, err error) problem {
	var limit *session.LimitError
	switch {
	case errors.As(err, &limit):
		return problem{status: http.StatusTooManyRequests, code: codeResourceExhausted, retryAfter: 1,
			detail: "too many " + limit.What + " (at most " + strconv.Itoa(limit.Max) + ")"}
	case errors.Is(err, session.ErrClosed):
		return problem{status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: 1,
			detail: "the session ended on this socket (moved, expired or closed): resume, and retry through the resumed session"}
	case errors.Is(err, session.ErrUnsafe):
		return problem{status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: 1,
			detail: "the backend answered too late for the holding to be safe for a window; it was ended: retry the acquire"}
	}
	return c.a.errorProblem(r, err)
}
