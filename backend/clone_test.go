package backend_test

import (
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leasesvc/leasesvc/backend"
)

// TestClone: a clone shares no memory with the row: every field that
// refers to memory (a slice, map or pointer) is copied. A new such field
// that Clone does not copy fails here.
func TestClone(t *testing.T) {
	r := backend.Row{Name: "n", Holder: "h", FencingToken: 3, Metadata: []byte(`{"a":1}`), Value: []byte(`{"priority":2}`),
		Legacy: backend.Legacy{RevokedBy: "op", RevokeReason: "why"}}
	c := backend.Clone(r)
	if !cmp.Equal(r, c) {
		t.Fatalf("Clone changed the row:\n%s", cmp.Diff(r, c))
	}
	rv, cv := reflect.ValueOf(r), reflect.ValueOf(c)
	for i := range rv.NumField() {
		switch rv.Field(i).Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer:
			if rv.Field(i).UnsafePointer() == cv.Field(i).UnsafePointer() {
				t.Errorf("Clone shares %s with the row", rv.Type().Field(i).Name)
			}
		}
	}
	if z := backend.Clone(backend.Row{}); z.Metadata != nil || z.Value != nil {
		t.Fatalf("Clone of an empty row = %+v, want nil slices", z)
	}
}
