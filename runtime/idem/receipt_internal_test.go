package idem

import (
	"bytes"
	"context"
	"encoding/hex"
	"testing"
)

// TestReceiptFingerprint: the engine's receiptFingerprint, which a retry
// is compared by, is the SQL function that completes a record.
func TestReceiptFingerprint(t *testing.T) {
	r := newRaceEnv(t)
	for _, c := range []struct {
		op string
		fp []byte
	}{
		{"createPayment", bytes.Repeat([]byte{7}, 32)},
		{"", []byte{}},
		{"ünïcode", []byte{0}},
		{"a", []byte("bc")},
		{"ab", []byte("c")},
	} {
		var sql []byte
		if err := r.pool.QueryRow(context.Background(), `SELECT `+r.schema+`.receipt_fingerprint($1, $2)`, c.op, c.fp).Scan(&sql); err != nil {
			t.Fatal(err)
		}
		if got := receiptFingerprint(c.op, c.fp); !bytes.Equal(got, sql) || len(got) != 16 {
			t.Errorf("receiptFingerprint(%q, %x) = %x; SQL gives %x", c.op, c.fp, got, sql)
		}
	}
	if bytes.Equal(receiptFingerprint("a", []byte("bc")), receiptFingerprint("ab", []byte("c"))) {
		t.Error("the operation's length does not separate it from the fingerprint")
	}
}

// TestRecordID: the engine's recordID, by which every statement finds a
// record, is the SQL function the migration and operators use; an id
// tells the three parts apart, and a UUIDv7 key lends it its time, so
// that new records come last in the primary key.
func TestRecordID(t *testing.T) {
	r := newRaceEnv(t)
	id := func(ns, scope, key string) []byte {
		t.Helper()
		var s string
		if err := r.pool.QueryRow(context.Background(), `SELECT `+r.schema+`.record_id($1, $2, $3)::text`, ns, scope, key).Scan(&s); err != nil {
			t.Fatal(err)
		}
		b, err := hex.DecodeString(string(bytes.ReplaceAll([]byte(s), []byte("-"), nil)))
		if err != nil || len(b) != 16 {
			t.Fatalf("record_id = %s", s)
		}
		if got := recordID(ns, scope, key); !bytes.Equal(got[:], b) {
			t.Errorf("recordID(%q, %q, %q) = %x; SQL gives %x", ns, scope, key, got, b)
		}
		return b
	}
	const v7 = "019ad8f0-3c1e-7a2b-8c4d-5e6f70819203"
	for _, c := range []struct {
		key   string
		clock bool
	}{
		{v7, true},
		{"019AD8F0-3C1E-7A2B-8C4D-5E6F70819203", true},
		{"019ad8f0-3c1e-4a2b-8c4d-5e6f70819203", false}, // a UUIDv4
		{"019ad8f0-3c1e-7a2b-8c4d-5e6f7081920", false},  // one digit short
		{"k", false},
		{"019ad8f0-3c1e-7a2b-cc4d-5e6f70819203", false}, // variant 11
		{"019ad8f0-3c1e-7a2b-8c4d-5e6f7081920g", false}, // not hex
		{"019ad8f0_3c1e-7a2b-8c4d-5e6f70819203", false},
		{"ünïcode-kéy", false},
		{"", false},
	} {
		b := id("ns", "t", c.key)
		if got := hex.EncodeToString(b[:8]) == "019ad8f03c1e7a2b"; got != c.clock {
			t.Errorf("record_id of %q begins %x; the key's time in front: %v, want %v", c.key, b[:8], got, c.clock)
		}
	}
	if bytes.Equal(id("ns", "t", v7), id("ns", "u", v7)) || bytes.Equal(id("ab", "c", "k"), id("a", "bc", "k")) ||
		bytes.Equal(id("ns", "t", "k"), id("ns", "t", "K")) {
		t.Error("two different (namespace, scope, key) share an id")
	}
}
