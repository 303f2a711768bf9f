package idem

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/pglocal"

	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

// TestReceiptFingerprint: the engine's receiptFingerprint, which a retry
// is compared by, is the SQL function that completes a record.
func TestReceiptFingerprint(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestRecordIDOnALatin1Database: the SQL functions hash the UTF-8 bytes
// and their lengths, as the engine does, whatever the database's encoding:
// on a LATIN1 database, octet_length of a text is its LATIN1 length.
func TestRecordIDOnALatin1Database(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := fmt.Sprintf("%s_latin1_%d", cfg.ConnConfig.Database, time.Now().UnixNano()%1e9)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()+" ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
	admin.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pglocal.DropDatabase(context.Background(), url, db) })
	cfg.ConnConfig.Database = db
	cfg.ConnConfig.RuntimeParams["client_encoding"] = "UTF8" // as pgx's strings are
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := idemmigrate.New(pool, "latin").Up(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"créerPaiement", "ünïcode", "plain"} {
		var id string
		var fp []byte
		if err := pool.QueryRow(ctx, `SELECT latin.record_id($1, $1, $1)::text, latin.receipt_fingerprint($1, '\x00')`, s).Scan(&id, &fp); err != nil {
			t.Fatal(err)
		}
		want := recordID(s, s, s)
		if got, err := hex.DecodeString(strings.ReplaceAll(id, "-", "")); err != nil || !bytes.Equal(got, want[:]) {
			t.Errorf("record_id(%q) on LATIN1 = %s; the engine's is %x", s, id, want)
		}
		if want := receiptFingerprint(s, []byte{0}); !bytes.Equal(fp, want) {
			t.Errorf("receipt_fingerprint(%q) on LATIN1 = %x; the engine's is %x", s, fp, want)
		}
	}
}
