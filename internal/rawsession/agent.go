package rawsession

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// The silent-socket rule of docs/contract.md §14 (A3): a socket on which
// nothing arrived for SilentWindows windows, and at least SilentMin, while
// heartbeats went out is dropped, and the agent resumes elsewhere.
const (
	SilentWindows = 4
	SilentMin     = 5 * time.Second
)

// Agent is the usual loop of an agent on a session: it opens the session
// on the first URL, heartbeats every window/4, leads until the send time
// of its last acked heartbeat + window × (1 − margin) (docs/contract.md
// §14), and, when its socket drops or the instance asks it to move,
// resumes on the next URL (make before break on a move) with every
// holding it keeps. Freeze and Kill stand in for SIGSTOP and SIGKILL of an
// agent that is a goroutine.
type Agent struct {
	// URLs are the instances, tried in turn; the first opens the session.
	URLs []string
	// Window is the session's window (0: the service's default, 1 s).
	Window time.Duration
	// Margin is the drift margin (0: 0.1).
	Margin float64
	// Header is sent with every upgrade request (Authorization).
	Header http.Header
	// HTTPClient dials the sockets (nil: http.DefaultClient).
	HTTPClient *http.Client
	// OnPush, if set, gets every pushed message (lost, revoked, yield, move).
	OnPush func(Message)
	// OnResume, if set, gets every resumed message and the URL it came from.
	OnResume func(url string, m Message)
	// Trace, if set, gets a line for each step that moves what the agent
	// leads: the session opened, an acquire answered (and on which
	// socket), a resume begun, answered or failed, a holding dropped, and
	// each ack that moved the deadline. It is called with the agent's lock
	// held: it must not call the agent.
	Trace func(line string)

	mu     sync.Mutex
	conn   *Conn
	url    int // index in URLs of conn's instance
	id     string
	window time.Duration
	// epoch is the highest epoch seen (opened, resumed) or proposed: the
	// next resume proposes epoch + 1 (docs/contract.md §14, A1).
	epoch int64
	held  map[string]Held
	// retired are the sockets a resume began after: their acks count no
	// more, and no heartbeat goes on them.
	retired map[*Conn]bool
	// latest is the socket on which open or resume was last sent: the
	// current socket of A2 from that moment, whose pushes count even
	// before its resumed arrives.
	latest *Conn
	// leaseTTL is the session lease TTL the service answered.
	leaseTTL time.Duration
	// unvouched are the holdings no ack has vouched for yet: an ack
	// counts for a holding only when it was read after the holding's
	// answer on the current socket (A4).
	unvouched map[string]unvouched
	// acquiring counts the acquires in flight per lease, and lostEarly
	// the lost and revoked pushes read for a holding not held yet while
	// one was: the answer that follows is not led (A5).
	acquiring map[string]int
	lostEarly map[Held]bool
	dropped   map[string]time.Time // holdings lost: name → until when the agent led them
	acked     time.Time            // latest acked heartbeat's send time over every socket
	stopped   bool                 // frozen or killed: sends nothing more
	beats     int64                // heartbeats sent
	ended     bool                 // the service ended the session (a resume found it gone)
	stop      chan struct{}
	done      chan struct{}
	lastErr   error
}

// Open opens the session and starts heartbeating.
func (a *Agent) Open(ctx context.Context) (Message, error) {
	if a.Margin == 0 {
		a.Margin = 0.1
	}
	c, err := a.dial(ctx, a.URLs[0])
	if err != nil {
		return Message{}, err
	}
	m, err := c.Open(ctx, a.Window)
	if err != nil {
		c.Drop()
		return m, fmt.Errorf("open: %w", err)
	}
	a.mu.Lock()
	a.conn, a.latest, a.id, a.window, a.epoch = c, c, m.SessionID, time.Duration(m.WindowMs)*time.Millisecond, m.Epoch
	a.leaseTTL = time.Duration(m.LeaseTTLMs) * time.Millisecond
	a.held, a.dropped, a.retired = map[string]Held{}, map[string]time.Time{}, map[*Conn]bool{}
	a.unvouched, a.acquiring, a.lostEarly = map[string]unvouched{}, map[string]int{}, map[Held]bool{}
	a.traceLocked("opened on %s, window %v", c.URL, a.window)
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	a.mu.Unlock()
	go a.loop()
	return m, nil
}

// dial connects to url; the socket's pushes go to push with the socket.
func (a *Agent) dial(ctx context.Context, url string) (*Conn, error) {
	var self atomic.Pointer[Conn]
	c, err := DialWith(ctx, a.HTTPClient, url, a.Header, func(m Message) { a.push(self.Load(), m) })
	if err == nil {
		self.Store(c)
	}
	return c, err
}

// push handles a message c pushed: a move is followed at once; the rest
// go to OnPush (a lost or revoked holding is forgotten first). A retired
// socket's pushes are ignored (docs/contract.md §14, A2): the resume that
// retired it says what is still held.
//
// The current socket is the one the last open or resume went on, from
// the moment it was sent: its lost and revoked pushes count even before
// its resumed is read (a move is followed only once it is read).
func (a *Agent) push(c *Conn, m Message) {
	a.mu.Lock()
	retired := c == nil || a.retired[c] || a.latest != c
	settled := c == a.conn
	a.mu.Unlock()
	if retired {
		return
	}
	switch m.Type {
	case "move":
		if !settled {
			return
		}
		go a.move()
	case "lost", "revoked":
		a.mu.Lock()
		if a.dropLocked(m.Name, m.FencingToken); a.acquiring[m.Name] > 0 {
			a.lostEarly[Held{Name: m.Name, FencingToken: m.FencingToken}] = true
			a.traceLocked("%s %s token %d read before its acquire's answer: that answer leads nothing", m.Type, m.Name, m.FencingToken)
		}
		a.mu.Unlock()
	}
	if a.OnPush != nil {
		a.OnPush(m)
	}
}

// SessionWindow returns the session's window as the service answered it.
func (a *Agent) SessionWindow() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.window
}

// Deadline returns until when the agent's holdings are led: the send time
// of the latest acked heartbeat + window × (1 − margin); the zero time
// before the first ack. A frozen or killed agent leads no more.
func (a *Agent) Deadline() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn != nil && !a.stopped {
		a.noteAckLocked(a.conn)
	}
	if a.acked.IsZero() {
		return time.Time{}
	}
	return a.acked.Add(time.Duration(float64(a.window) * (1 - a.Margin)))
}

// unvouched is a holding no ack has vouched for yet (A4): it is led at most
// until capAt (its acquire's send time + the session lease TTL × (1 −
// margin)) until conn, the current socket, reads an ack after its answer,
// which came after conn's acks-th ack.
type unvouched struct {
	conn  *Conn
	acks  int64
	capAt time.Time
}

// LeaseDeadline returns until when the agent leads its holding of name:
// Deadline, and no later than its acquire's send time + the session lease
// TTL × (1 − margin) until an ack is read after its answer on the current
// socket (docs/contract.md §14, A4); the zero time when it holds none.
func (a *Agent) LeaseDeadline(name string) time.Time {
	d := a.Deadline()
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.held[name]; !ok {
		return time.Time{}
	}
	u, ok := a.unvouched[name]
	if !ok {
		return d
	}
	if u.conn == a.conn && !a.retired[u.conn] && u.conn.Acks() > u.acks {
		delete(a.unvouched, name)
		return d
	}
	if a.leaseTTL > 0 && u.capAt.Before(d) {
		return u.capAt
	}
	return d
}

// Leads reports whether the agent leads now (before its deadline).
func (a *Agent) Leads() bool {
	d := a.Deadline()
	return !d.IsZero() && time.Now().Before(d)
}

// loop heartbeats every window/4, and resumes elsewhere when the socket
// ends, until stopped.
func (a *Agent) loop() {
	defer close(a.done)
	t := time.NewTicker(a.window / 4)
	defer t.Stop()
	for {
		a.mu.Lock()
		c := a.conn
		a.mu.Unlock()
		select {
		case <-a.stop:
			return
		case <-c.Done():
			if !a.resume(c) {
				select { // wait a beat before the next instance
				case <-a.stop:
					return
				case <-time.After(a.window / 4):
				}
			}
			continue
		case <-t.C:
		}
		if a.isStopped() {
			return
		}
		a.mu.Lock()
		retired := a.retired[c]
		a.mu.Unlock()
		if retired { // a resume is under way: no heartbeat on the old socket
			continue
		}
		if s := c.Silent(); s > max(SilentWindows*a.window, SilentMin) {
			// A paused instance or a half-open connection: resume
			// elsewhere (docs/contract.md §14, A3).
			a.mu.Lock()
			a.traceLocked("nothing on %s for %v: dropped", c.URL, s)
			a.mu.Unlock()
			c.Drop()
			continue
		}
		if c.Heartbeat(context.Background()) == nil { // bounded by the silence check above
			a.mu.Lock()
			a.beats++
			a.mu.Unlock()
		}
		a.noteAck(c)
	}
}

// noteAck carries c's latest ack into the agent's.
func (a *Agent) noteAck(c *Conn) {
	a.mu.Lock()
	a.noteAckLocked(c)
	a.mu.Unlock()
}

func (a *Agent) isStopped() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopped
}

// move resumes on the next instance and then drops the old socket (make
// before break).
func (a *Agent) move() {
	a.mu.Lock()
	old := a.conn
	a.mu.Unlock()
	if a.resume(old) {
		old.Drop()
	}
}

// resume resumes the session on the next instance after old's; false
// when it could not (the caller tries again later).
//
// Once the resume is sent, its instance may own the session while old's
// still acks (it learns only at its next compare-and-set), so old is
// retired: no heartbeat goes on it and its acks count no more. When the
// resume fails after it was sent, old is dropped, so that the loop resumes
// again rather than heartbeat a socket that vouches for nothing
// (docs/contract.md §14, why the agent always stops, steps 5 and 6).
func (a *Agent) resume(old *Conn) bool {
	a.mu.Lock()
	if a.stopped || a.conn != old {
		moved := a.conn != old // another resume already replaced old
		a.mu.Unlock()
		return moved
	}
	next := (a.url + 1) % len(a.URLs)
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := a.dial(ctx, a.URLs[next])
	if err != nil {
		a.setErr(err)
		a.mu.Lock()
		a.url = next
		a.mu.Unlock()
		return false
	}
	a.mu.Lock()
	if a.stopped || a.conn != old {
		moved := a.conn != old
		a.mu.Unlock()
		c.Drop()
		return moved
	}
	a.noteAckLocked(old)
	a.retired[old] = true
	a.latest = c
	a.epoch++
	epoch := a.epoch
	a.traceLocked("resume from %s to %s at epoch %d with %v; %s retired", old.URL, c.URL, epoch, a.held, old.URL)
	held := make([]Held, 0, len(a.held))
	for _, h := range a.held {
		held = append(held, h)
	}
	id := a.id
	a.mu.Unlock()
	m, err := c.Resume(ctx, id, epoch, held)
	if err != nil {
		c.Drop()
		old.Drop()
		a.mu.Lock()
		a.traceLocked("resume on %s failed: %v; both sockets dropped", c.URL, err)
		a.mu.Unlock()
		a.setErr(err)
		if Code(err) == "session_not_found" { // it died: nothing to resume, ever
			a.mu.Lock()
			a.ended = true
			a.mu.Unlock()
			go a.halt(false)
			return false
		}
		a.mu.Lock()
		a.url = next
		a.mu.Unlock()
		return false
	}
	a.mu.Lock()
	a.traceLocked("resumed on %s at epoch %d: leases %v, lost %v", c.URL, m.Epoch, m.Leases, m.Lost)
	a.epoch = max(a.epoch, m.Epoch)
	for _, l := range m.Lost {
		a.dropLocked(l.Name, l.FencingToken)
	}
	for name, u := range a.unvouched { // every ack here is read after the resumed (A4)
		u.conn, u.acks = c, m.AcksBefore
		a.unvouched[name] = u
	}
	a.conn, a.url = c, next
	a.mu.Unlock()
	if a.OnResume != nil {
		a.OnResume(a.URLs[next], m)
	}
	// Heartbeat at once: the agent leads again from the first ack here.
	_ = c.Heartbeat(ctx)
	return true
}

// dropLocked forgets a lost holding, noting until when the agent led it:
// now, or its deadline if that came first (the acks of the socket that
// reported the loss do not vouch for it).
func (a *Agent) dropLocked(name string, token int64) bool {
	h, ok := a.held[name]
	if !ok || h.FencingToken != token {
		return false
	}
	delete(a.held, name)
	delete(a.unvouched, name)
	if a.conn != nil {
		a.noteAckLocked(a.conn)
	}
	until := time.Now()
	if !a.acked.IsZero() {
		if d := a.acked.Add(time.Duration(float64(a.window) * (1 - a.Margin))); d.Before(until) {
			until = d
		}
	}
	a.dropped[name] = until
	a.traceLocked("dropped %s token %d: led until %s", name, token, clock(until))
	return true
}

// Dropped reports whether the holding of name was lost (pushed lost or
// revoked, or lost on a resume) and until when the agent led it.
func (a *Agent) Dropped(name string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.dropped[name]
	return t, ok
}

func (a *Agent) noteAckLocked(c *Conn) {
	if a.retired[c] {
		return // its acks vouch for nothing since a resume began elsewhere
	}
	if at := c.Acked(); at.After(a.acked) {
		a.traceLocked("ack on %s of the heartbeat sent at %s", c.URL, clock(at))
		a.acked = at
	}
}

func (a *Agent) setErr(err error) {
	a.mu.Lock()
	a.lastErr = err
	a.mu.Unlock()
}

// Ended reports whether the service ended the session: a resume found it
// gone (its window passed without a heartbeat reaching an instance). The
// agent has stopped.
func (a *Agent) Ended() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ended
}

// Heartbeats returns how many heartbeats the agent sent.
func (a *Agent) Heartbeats() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.beats
}

// LastErr returns the last error of a resume, or nil.
func (a *Agent) LastErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastErr
}

// current returns the current socket.
func (a *Agent) current() *Conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conn
}

// Acquire acquires name for holder through the session (wait > 0: a
// waiting acquire, waitMs). A holding is kept for resumes.
func (a *Agent) Acquire(ctx context.Context, name, holder string, wait time.Duration) (lease.Lease, error) {
	return a.AcquireAs(ctx, Message{Name: name, Holder: holder, WaitMs: wait.Milliseconds()})
}

// AcquireAs sends the acquire m (Name, Holder and, as a candidate,
// WaitMs, Priority, Preempt) through the session.
func (a *Agent) AcquireAs(ctx context.Context, m Message) (lease.Lease, error) {
	m.Type = "acquire"
	name, holder := m.Name, m.Holder
	a.mu.Lock()
	a.acquiring[name]++
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		if a.acquiring[name]--; a.acquiring[name] == 0 {
			delete(a.acquiring, name)
			for k := range a.lostEarly {
				if k.Name == name {
					delete(a.lostEarly, k)
				}
			}
		}
		a.mu.Unlock()
	}()
	for {
		c, err := a.usable(ctx)
		if err != nil {
			return lease.Lease{}, err
		}
		sent := time.Now()
		ans, err := c.Request(ctx, m)
		if err != nil {
			return lease.Lease{}, err
		}
		l, err := LeaseOf(ans)
		if err != nil {
			return l, err
		}
		a.mu.Lock()
		if a.lostEarly[Held{Name: name, FencingToken: l.FencingToken}] {
			// Its lost was read first (A5): the holding left the
			// instance's table before this answer, and no ack covers it.
			a.traceLocked("acquire of %s token %d answered after its lost: not led", name, l.FencingToken)
			a.mu.Unlock()
			return lease.Lease{}, fmt.Errorf("rawsession: acquire of %s token %d answered after its lost: %w", name, l.FencingToken, lease.ErrLost)
		}
		if cur, ok := a.held[name]; ok && cur.FencingToken > l.FencingToken {
			// A later holding's answer came first (requests answered out
			// of order): the later token stays, and this one leads nothing.
			a.traceLocked("acquire of %s token %d answered after token %d: stale", name, l.FencingToken, cur.FencingToken)
			a.mu.Unlock()
			return lease.Lease{}, fmt.Errorf("rawsession: acquire of %s answered token %d after token %d: %w", name, l.FencingToken, cur.FencingToken, lease.ErrLost)
		}
		if !a.retired[c] {
			a.traceLocked("acquired %s token %d on %s", name, l.FencingToken, c.URL)
			a.held[name] = Held{Name: name, Holder: holder, FencingToken: l.FencingToken}
			a.unvouched[name] = unvouched{conn: c, acks: ans.AcksBefore, capAt: sent.Add(time.Duration(float64(a.leaseTTL) * (1 - a.Margin)))}
			a.mu.Unlock()
			return l, nil
		}
		a.traceLocked("acquire of %s token %d answered on %s, retired: acquiring again", name, l.FencingToken, c.URL)
		a.mu.Unlock()
		// A resume began after c became current: it did not claim this
		// holding, so the acks of the socket it opened do not vouch for
		// it. Acquire it again through the new socket: the same holder
		// through the same session at a later epoch takes the holding over
		// (docs/contract.md §14, Resume); until that answer the agent does
		// not lead it.
		m.WaitMs = 0
	}
}

// usable returns the current socket once no resume is under way from it.
func (a *Agent) usable(ctx context.Context) (*Conn, error) {
	for {
		a.mu.Lock()
		c, retired := a.conn, a.retired[a.conn]
		a.mu.Unlock()
		if !retired {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-c.Done():
		case <-time.After(5 * time.Millisecond): // the resume's end is not signalled
		}
	}
}

// Do sends a request (renew, release, transfer) through the current
// socket; a release or transfer that succeeds forgets the holding.
func (a *Agent) Do(ctx context.Context, m Message) (lease.Lease, error) {
	ans, err := a.current().Request(ctx, m)
	if err != nil {
		return lease.Lease{}, err
	}
	if m.Type == "release" || m.Type == "transfer" {
		a.mu.Lock()
		delete(a.held, m.Name)
		a.mu.Unlock()
	}
	return LeaseOf(ans)
}

// Held returns the holdings the agent keeps.
func (a *Agent) Held() []Held {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Held, 0, len(a.held))
	for _, h := range a.held {
		out = append(out, h)
	}
	return out
}

// halt stops the loop; with drop, the socket closes too.
func (a *Agent) halt(drop bool) {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return
	}
	a.noteAckLocked(a.conn) // the last ack it saw counts; none after this
	a.stopped = true
	c := a.conn
	close(a.stop)
	a.mu.Unlock()
	<-a.done
	if drop {
		c.Drop()
	}
}

// Freeze stops the agent as SIGSTOP would: no more heartbeats or
// resumes, the socket left open and silent. It leads until its deadline.
func (a *Agent) Freeze() { a.halt(false) }

// Kill stops the agent as SIGKILL would: no more heartbeats, and the
// socket is dropped without a close message.
func (a *Agent) Kill() { a.halt(true) }

// Close sends close (the service releases every holding) and stops.
func (a *Agent) Close(ctx context.Context) error {
	c := a.current()
	a.halt(false)
	err := c.Close(ctx)
	if err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	return nil
}

// traceLocked sends a line to Trace, if set; a.mu is held.
func (a *Agent) traceLocked(format string, args ...any) {
	if a.Trace != nil {
		a.Trace(clock(time.Now()) + " " + fmt.Sprintf(format, args...))
	}
}

// clock formats t for a trace line.
func clock(t time.Time) string { return t.UTC().Format("15:04:05.000000") }
