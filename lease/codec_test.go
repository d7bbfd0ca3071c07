package lease_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// codecBase is the instant the filled records' times derive from: whole
// microseconds, as every driver stores them.
var codecBase = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

// fill sets v, a field of the given name, to a value that is not zero and
// that the codec must keep; n makes values of different fields differ. A
// field of a type it does not know fails the test: teach fill the type,
// and the codec the field.
func fill(t *testing.T, name string, v reflect.Value, n int) {
	t.Helper()
	switch v.Interface().(type) {
	case string:
		v.SetString(name + " ✓ <&> \"q\"")
	case int, int64:
		v.SetInt(int64(1000*n + 7))
	case time.Duration:
		v.SetInt(int64(time.Duration(n+1) * 1500 * time.Millisecond))
	case time.Time:
		v.Set(reflect.ValueOf(codecBase.Add(time.Duration(n) * time.Second)))
	case bool:
		v.SetBool(true)
	case json.RawMessage:
		v.Set(reflect.ValueOf(json.RawMessage(`{"field":"` + name + ` <&>","n":[1,2]}`)))
	case []lease.Candidate:
		var c lease.Candidate
		fillStruct(t, reflect.ValueOf(&c).Elem(), n)
		v.Set(reflect.ValueOf([]lease.Candidate{c, c}))
	default:
		t.Fatalf("field %s of type %s: fill does not know the type; teach it (and the codec the field)", name, v.Type())
	}
}

// fillStruct fills every field of the struct v.
func fillStruct(t *testing.T, v reflect.Value, n int) {
	t.Helper()
	for i := range v.NumField() {
		fill(t, v.Type().Field(i).Name, v.Field(i), n+i)
	}
}

// roundTrip encodes r and decodes what a driver would store.
func roundTrip(t *testing.T, r *lease.Record) (backend.Row, *lease.Record) {
	t.Helper()
	row, err := lease.EncodeRow(r)
	if err != nil {
		t.Fatalf("EncodeRow(%+v): %v", r, err)
	}
	got, err := lease.DecodeRow(row)
	if err != nil {
		t.Fatalf("DecodeRow(%+v): %v", row, err)
	}
	return row, got
}

// TestCodecRoundTripsEveryField: every field of a Record, all set at once
// and each set alone, comes back from EncodeRow and DecodeRow as it was. A
// field added to Record that the codec does not store fails here.
func TestCodecRoundTripsEveryField(t *testing.T) {
	var all lease.Record
	fillStruct(t, reflect.ValueOf(&all).Elem(), 0)
	if _, got := roundTrip(t, &all); !cmp.Equal(&all, got) {
		t.Fatalf("a record with every field set reads back changed (-written +read):\n%s", cmp.Diff(&all, got))
	}
	rowType := reflect.TypeFor[backend.Row]()
	typ := reflect.TypeFor[lease.Record]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			var r lease.Record
			fill(t, f.Name, reflect.ValueOf(&r).Elem().Field(i), i)
			row, got := roundTrip(t, &r)
			if !cmp.Equal(&r, got) {
				t.Fatalf("a record with only %s set reads back changed (-written +read):\n%s", f.Name, cmp.Diff(&r, got))
			}
			// A field is a column of the Row, of the same name and type, or
			// it is in the Value; never both, never neither.
			col, isCol := rowType.FieldByName(f.Name)
			switch {
			case isCol && col.Type != f.Type:
				t.Fatalf("Row.%s is a %s, Record.%s a %s", f.Name, col.Type, f.Name, f.Type)
			case isCol && row.Value != nil:
				t.Fatalf("column %s is also in the value %s", f.Name, row.Value)
			case isCol && !reflect.DeepEqual(reflect.ValueOf(row).FieldByName(f.Name).Interface(), reflect.ValueOf(r).Field(i).Interface()):
				t.Fatalf("Row.%s = %v, want %v", f.Name, reflect.ValueOf(row).FieldByName(f.Name), reflect.ValueOf(r).Field(i))
			case !isCol && row.Value == nil:
				t.Fatalf("%s is neither a column nor in the value", f.Name)
			}
		})
	}
}

// TestCodecEmpty: a record that uses no field of the value stores none, and
// empty metadata reads back as none.
func TestCodecEmpty(t *testing.T) {
	r := &lease.Record{Name: "n", Holder: "h", FencingToken: 1, TTL: time.Second, AcquireTime: codecBase,
		RenewTime: codecBase, ExpireTime: codecBase.Add(time.Second), Metadata: json.RawMessage{}}
	row, got := roundTrip(t, r)
	if row.Value != nil || got.Metadata != nil {
		t.Fatalf("EncodeRow of a plain record: value %q, metadata read back %q; want nil, nil", row.Value, got.Metadata)
	}
	if got, err := lease.DecodeRow(backend.Row{Name: "n", Value: []byte{}}); err != nil || got.Candidates != nil || !got.ReservedUntil.IsZero() {
		t.Fatalf("DecodeRow of an empty value = %+v, %v", got, err)
	}
}

// TestCodecCopies: the row shares no memory with the record written, and
// the record read shares none with what the driver read.
func TestCodecCopies(t *testing.T) {
	r := &lease.Record{Name: "n", Metadata: json.RawMessage(`{"a":1}`), Checkpoint: json.RawMessage(`{"c":1}`),
		Candidates: []lease.Candidate{{ID: "w"}}}
	row, got := roundTrip(t, r)
	row.Metadata[1] = 'X'
	got.Checkpoint[1], got.Candidates[0].ID = 'X', "z"
	if string(r.Metadata) != `{"a":1}` || string(r.Checkpoint) != `{"c":1}` || r.Candidates[0].ID != "w" {
		t.Fatalf("the row or the record read shares memory with the record written: %+v", r)
	}
}

// TestCodecValueFormat pins the JSON that rows hold: the keys that rows
// written by earlier versions hold (the succession state) read as they did,
// and what is written now is this object, byte for byte.
func TestCodecValueFormat(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
	r := &lease.Record{Name: "n", RevokedBy: "op", RevokeReason: "stuck <&>", Priority: 4,
		Checkpoint: json.RawMessage(`{"b":"<&>"}`), CheckpointToken: 2,
		Candidates:  []lease.Candidate{{ID: "w", Holder: "x", Priority: 1, Since: codecBase, Until: codecBase}},
		ReservedFor: "x", ReservedPrincipal: "p", ReservedUntil: at, DeleteTime: at,
		SessionKey: "k", SessionEpoch: 3, SessionWindow: 1250 * time.Millisecond}
	const want = `{"revokedBy":"op","revokeReason":"stuck <&>","priority":4,"checkpoint":{"b":"<&>"},"checkpointToken":2,` +
		`"candidates":[{"id":"w","holder":"x","priority":1,"since":"2026-01-02T03:04:05.000006Z","until":"2026-01-02T03:04:05.000006Z"}],` +
		`"reservedFor":"x","reservedPrincipal":"p","reservedUntil":"2026-01-02T02:04:05.000006Z","deleteTime":"2026-01-02T02:04:05.000006Z",` +
		`"sessionKey":"k","sessionEpoch":3,"sessionWindowMs":1250}`
	row, err := lease.EncodeRow(r)
	if err != nil || string(row.Value) != want {
		t.Fatalf("EncodeRow value =\n%s, %v; want\n%s", row.Value, err, want)
	}
	// As the version before revocation joined the value wrote it.
	older := `{"priority":4,"checkpoint":{"b":1},"reservedFor":"x","reservedUntil":"2026-01-02T02:04:05.000006Z","sessionWindowMs":1250}`
	got, err := lease.DecodeRow(backend.Row{Name: "n", Value: []byte(older)})
	if err != nil || got.Priority != 4 || string(got.Checkpoint) != `{"b":1}` || got.ReservedFor != "x" ||
		!got.ReservedUntil.Equal(at) || got.ReservedUntil.Location() != time.UTC || got.SessionWindow != 1250*time.Millisecond || got.RevokeReason != "" {
		t.Fatalf("DecodeRow of an older value = %+v, %v", got, err)
	}
}

// TestCodecLegacyColumns: a row written before the value held the
// revocation reads back with the revocation of its old columns; the value
// wins where it holds the field; and EncodeRow clears the old columns.
func TestCodecLegacyColumns(t *testing.T) {
	legacy := backend.Legacy{RevokedBy: "op", RevokeReason: "stuck"}
	got, err := lease.DecodeRow(backend.Row{Name: "n", Value: []byte(`{"priority":2}`), Legacy: legacy})
	if err != nil || got.RevokedBy != "op" || got.RevokeReason != "stuck" || got.Priority != 2 {
		t.Fatalf("DecodeRow of a row with legacy columns = %+v, %v; want the revocation and the priority", got, err)
	}
	got, err = lease.DecodeRow(backend.Row{Name: "n", Value: []byte(`{"revokedBy":"new","revokeReason":"newer"}`), Legacy: legacy})
	if err != nil || got.RevokedBy != "new" || got.RevokeReason != "newer" {
		t.Fatalf("DecodeRow with both = %+v, %v; want the value's revocation", got, err)
	}
	// Every legacy column is a field of Record of the same name and type,
	// that DecodeRow fills from it.
	lt := reflect.TypeFor[backend.Legacy]()
	for i := range lt.NumField() {
		f := lt.Field(i)
		var l backend.Legacy
		fill(t, f.Name, reflect.ValueOf(&l).Elem().Field(i), i)
		got, err := lease.DecodeRow(backend.Row{Name: "n", Legacy: l})
		rf, ok := reflect.TypeFor[lease.Record]().FieldByName(f.Name)
		if err != nil || !ok || rf.Type != f.Type || !reflect.DeepEqual(reflect.ValueOf(*got).FieldByName(f.Name).Interface(), reflect.ValueOf(l).Field(i).Interface()) {
			t.Fatalf("legacy column %s does not read back as Record.%s: %+v, %v", f.Name, f.Name, got, err)
		}
	}
	var all lease.Record
	fillStruct(t, reflect.ValueOf(&all).Elem(), 0)
	if row, err := lease.EncodeRow(&all); err != nil || row.Legacy != (backend.Legacy{}) {
		t.Fatalf("EncodeRow wrote legacy columns %+v, %v; want them cleared", row.Legacy, err)
	}
}

// TestCodecErrors: a checkpoint or a value that is not JSON is an error
// that names the lease.
func TestCodecErrors(t *testing.T) {
	if _, err := lease.EncodeRow(&lease.Record{Name: "n", Checkpoint: json.RawMessage(`{"b":`)}); err == nil || !strings.Contains(err.Error(), `"n"`) {
		t.Fatalf("EncodeRow of a checkpoint that is not JSON = %v", err)
	}
	if _, err := lease.DecodeRow(backend.Row{Name: "n", Value: []byte(`{"priority":`)}); err == nil || !strings.Contains(err.Error(), `"n"`) {
		t.Fatalf("DecodeRow of a value that is not JSON = %v", err)
	}
}
