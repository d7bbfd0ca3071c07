package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

type checkpointKey struct{}

// inherited is the checkpoint a term began with.
type inherited struct {
	checkpoint json.RawMessage
	token      int64
}

// CheckpointFromContext returns the checkpoint that the term whose leading
// ctx ctx is (or derives from) inherited (docs/contract.md §8): the JSON
// object its predecessor (or an earlier term of this Elector) last wrote,
// as the acquire answered it, and the fencing token of the holding that
// wrote it. nil and 0 when the lease has no checkpoint or ctx is no
// leading ctx. Resume the work from it.
func CheckpointFromContext(ctx context.Context) (checkpoint json.RawMessage, writtenBy int64) {
	in, _ := ctx.Value(checkpointKey{}).(inherited)
	return in.checkpoint, in.token
}

// encodeCheckpoint returns v as a JSON object of at most
// MaxCheckpointBytes: a json.RawMessage or []byte is taken as it is,
// anything else is marshalled.
func encodeCheckpoint(v any) (json.RawMessage, error) {
	var raw []byte
	switch x := v.(type) {
	case json.RawMessage:
		raw = x
	case []byte:
		raw = x
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("client: checkpoint: %w", err)
		}
		raw = b
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("client: checkpoint must be a JSON object: %w", err)
	}
	if buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return nil, errors.New("client: checkpoint must be a JSON object")
	}
	if buf.Len() > MaxCheckpointBytes {
		return nil, fmt.Errorf("client: checkpoint is %d bytes, more than %d", buf.Len(), MaxCheckpointBytes)
	}
	return buf.Bytes(), nil
}

// SetCheckpoint records v, a JSON object of at most 16 KiB (a
// json.RawMessage is sent as it is, anything else is marshalled), as the
// checkpoint of the current term (docs/contract.md §8). It is written with
// the next renew, or with the release or transfer that ends the term if
// that comes first, and the next holder inherits it
// (CheckpointFromContext). A later call replaces a checkpoint not yet
// written. It costs no request. It may be called until OnStartedLeading
// returns, also after the leading ctx is cancelled by a graceful stop or
// a step-down (the release then carries it). Without a term, or once the
// holding is lost, it returns an error that matches ErrNotLeading.
func (e *Elector) SetCheckpoint(v any) error {
	cp, err := encodeCheckpoint(v)
	if err != nil {
		return err
	}
	_, err = e.setPending(cp)
	return err
}

// setPending stores cp as the term's pending checkpoint.
func (e *Elector) setPending(cp json.RawMessage) (*term, error) {
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	if t == nil {
		return nil, ErrNotLeading
	}
	if err := t.setPending(cp); err != nil {
		return nil, err
	}
	return t, nil
}

// Checkpoint is SetCheckpoint, then writes the checkpoint at once with a
// renew of the holding and returns when the service has stored it: after
// it returns nil, a successor inherits it even if this process dies now.
// ctx bounds the wait. When the renew fails, the error is returned and the
// checkpoint stays pending: the next renew, or the release, sends it. It
// works the same after the leading ctx was cancelled by a graceful stop or
// a step-down (not a loss), since the Elector renews until
// OnStartedLeading returns. Without a term, or once the holding is lost,
// it returns an error that matches ErrNotLeading. It may be called from
// OnStartedLeading and OnYieldRequested.
func (e *Elector) Checkpoint(ctx context.Context, v any) error {
	cp, err := encodeCheckpoint(v)
	if err != nil {
		return err
	}
	t, err := e.setPending(cp)
	if err != nil {
		return err
	}
	return e.ask(ctx, t, termReq{ctx: ctx})
}

// Transfer hands the holding over to the holder to (docs/contract.md §8):
// the service ends the holding now, writes checkpoint (if not nil, as
// SetCheckpoint takes it; nil sends the pending one, if any) and reserves
// the lease for to for the service's default of 5s, so that
// to's acquire gets the next fencing token and the checkpoint, and
// anyone else's is refused meanwhile. Stop acting as leader before calling
// it: to may begin as soon as the service has answered. On success the
// leading ctx is cancelled with a cause that matches ErrTransferred, no
// release follows, and once OnStartedLeading has returned the Elector
// campaigns again as a follower (cancel Run's ctx to stop it). It may be
// called from OnStartedLeading. On failure the term goes on, unless the
// holding was lost. Without a term it returns ErrNotLeading.
func (e *Elector) Transfer(ctx context.Context, to string, checkpoint any) error {
	var cp json.RawMessage
	if checkpoint != nil {
		var err error
		if cp, err = encodeCheckpoint(checkpoint); err != nil {
			return err
		}
	}
	if to == "" || to == e.cfg.Holder {
		return fmt.Errorf("client: Elector.Transfer: the successor %q must be another holder than %q", to, e.cfg.Holder)
	}
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	var ended error
	if t != nil {
		ended = t.endedErr()
	}
	switch {
	case t == nil:
		return ErrNotLeading
	case ended != nil:
		return fmt.Errorf("%w: %w", ErrNotLeading, ended)
	}
	return e.ask(ctx, t, termReq{ctx: ctx, to: to, checkpoint: cp})
}

// ask hands r to the lead loop of t and waits for its answer.
func (e *Elector) ask(ctx context.Context, t *term, r termReq) error {
	r.done = make(chan error, 1)
	select {
	case t.reqs <- r:
	case <-t.over:
		return ErrNotLeading
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
