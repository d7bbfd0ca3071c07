package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// checkpointFile is the file LEASE_CHECKPOINT_FILE names in CMD's
// environment during one term of `leasectl run` (docs/contract.md §8). It
// starts with the checkpoint the term inherited, a JSON object, or empty
// when the lease has none. CMD records its progress by replacing it with a
// JSON object of at most 16 KiB (best written to a file next to it and
// renamed over it, so that it is never read half-written); leasectl
// hands the new content to the Elector, which writes it with its next
// renew, and once more when CMD is gone, so the release carries CMD's last
// word. Content that is empty, unchanged, or not such an object is not
// sent (a bad one is logged once).
type checkpointFile struct {
	dir, path string
	el        *client.Elector
	logf      func(string, ...any)
	last      []byte // compact content last handed to the Elector, or inherited
	bad       []byte // content last refused, so that it is logged once
}

// newCheckpointFile makes the term's checkpoint file, in a directory of
// its own, holding the checkpoint of lctx.
func newCheckpointFile(lctx context.Context, el *client.Elector, logf func(string, ...any)) (*checkpointFile, error) {
	dir, err := os.MkdirTemp("", "leasectl-checkpoint-")
	if err != nil {
		return nil, fmt.Errorf("checkpoint file: %w", err)
	}
	cp, _ := client.CheckpointFromContext(lctx)
	f := &checkpointFile{dir: dir, path: filepath.Join(dir, "checkpoint.json"), el: el, logf: logf, last: cp}
	if err := os.WriteFile(f.path, cp, 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("checkpoint file: %w", err)
	}
	return f, nil
}

// watch hands the file's content to the Elector every interval until ctx
// is done.
func (f *checkpointFile) watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.send()
		}
	}
}

// send hands the file's content to the Elector if it is a new, valid
// checkpoint.
func (f *checkpointFile) send() {
	raw, err := os.ReadFile(f.path)
	if err != nil {
		f.refuse([]byte(err.Error()), fmt.Sprintf("cannot read %s: %v", f.path, err))
		return
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		f.refuse(raw, fmt.Sprintf("%s is not JSON (%v): not sent", f.path, err))
		return
	}
	if bytes.Equal(compact.Bytes(), f.last) {
		return
	}
	if err := f.el.SetCheckpoint(json.RawMessage(compact.Bytes())); err != nil {
		if errors.Is(err, client.ErrNotLeading) {
			return // the holding is over: nothing can take it now
		}
		f.refuse(raw, fmt.Sprintf("%s: %v: not sent", f.path, err))
		return
	}
	f.last, f.bad = compact.Bytes(), nil
}

// refuse logs why content was not sent, once for the same content.
func (f *checkpointFile) refuse(content []byte, why string) {
	if bytes.Equal(content, f.bad) {
		return
	}
	f.bad = bytes.Clone(content)
	f.logf("checkpoint %s", why)
}

// close removes the file and its directory.
func (f *checkpointFile) close() { _ = os.RemoveAll(f.dir) }
