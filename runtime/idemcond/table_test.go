package idemcond_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idemcond"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

var notes = idemcond.Table{Name: "notes", Key: []string{"account", "id"}}

// notesPool is a pool on a schema of its own with the notes table: keyed by
// account first, its version starting at 1.
func notesPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := dbtest.Pool(t)
	_, err := pool.Exec(context.Background(), `CREATE TABLE notes (
		account text NOT NULL, id text NOT NULL, body text NOT NULL,
		version bigint NOT NULL DEFAULT 1, PRIMARY KEY (account, id))`)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

func must(t *testing.T, ifMatch, ifNoneMatch string) idemcond.Preconditions {
	t.Helper()
	p, err := idemcond.Parse(ifMatch, ifNoneMatch)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// write runs f in a transaction of its own, committed when f returns nil.
func write(pool *pgxpool.Pool, f func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(context.Background(), pool, f)
}

func update(pool *pgxpool.Pool, p idemcond.Preconditions, body string) (idemcond.Version, error) {
	var v idemcond.Version
	err := write(pool, func(tx pgx.Tx) (err error) {
		v, err = notes.UpdateTx(context.Background(), tx, p, []any{"acct_ada", "n1"}, map[string]any{"body": body})
		return err
	})
	return v, err
}

func current(t *testing.T, pool *pgxpool.Pool) (string, idemcond.Version) {
	t.Helper()
	var body string
	var v idemcond.Version
	if err := pool.QueryRow(context.Background(), `SELECT body, version FROM notes WHERE account = 'acct_ada' AND id = 'n1'`).Scan(&body, &v); err != nil {
		t.Fatal(err)
	}
	return body, v
}

func create(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	err := write(pool, func(tx pgx.Tx) error {
		v, err := notes.InsertTx(context.Background(), tx, must(t, "", "*"), []any{"acct_ada", "n1"}, map[string]any{"body": "first"})
		if err == nil && v != 1 {
			t.Errorf("a new row's version %d; want its default, 1", v)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRacingWritesOneWins: clients that read the same version and write
// at once, each in its own transaction on its own connection: exactly one
// write commits, every other gets 412 and changes nothing, round after
// round; the row holds the winner's value and one more version per round.
func TestRacingWritesOneWins(t *testing.T) {
	pool := notesPool(t)
	create(t, pool)
	const clients, rounds = 8, 10
	for round := range rounds {
		_, read := current(t, pool)
		p := must(t, read.ETag(), "")
		var wg sync.WaitGroup
		start := make(chan struct{})
		statuses := make([]int, clients)
		versions := make([]idemcond.Version, clients)
		errs := make([]error, clients)
		for i := range clients {
			wg.Go(func() {
				<-start
				versions[i], errs[i] = update(pool, p, "client "+string(rune('a'+i)))
				statuses[i] = status(errs[i])
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, s := range statuses {
			switch {
			case s == 0 && winner < 0:
				winner = i
			case s == 0:
				t.Fatalf("round %d: clients %d and %d both wrote on %s", round, winner, i, read.ETag())
			case s != 412:
				t.Fatalf("round %d: client %d: %v; want 412", round, i, errs[i])
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no client wrote: %v", round, errs)
		}
		body, v := current(t, pool)
		if want := "client " + string(rune('a'+winner)); body != want || v != read+1 || versions[winner] != v {
			t.Fatalf("round %d: the row holds %q at %d (the winner returned %d); want %q at %d", round, body, v, versions[winner], want, read+1)
		}
	}
}

// TestSecondWriteWaitsThenFails: a write based on the same read as one
// whose transaction is still open waits for its row lock, and once that
// transaction commits gets 412; had it read before the lock was taken, it
// would have erased the first write.
func TestSecondWriteWaitsThenFails(t *testing.T) {
	pool := notesPool(t)
	create(t, pool)
	ctx := context.Background()
	p := must(t, idemcond.Version(1).ETag(), "")
	first, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if _, err := notes.UpdateTx(ctx, first, p, []any{"acct_ada", "n1"}, map[string]any{"body": "first writer"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := update(pool, p, "second writer")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the second write did not wait for the first's lock: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; status(err) != 412 || !strings.Contains(err.Error(), `"2"`) {
		t.Fatalf("the second write: %v; want 412 naming the current ETag \"2\"", err)
	}
	if body, v := current(t, pool); body != "first writer" || v != 2 {
		t.Fatalf("the row holds %q at %d; want the first writer's at 2", body, v)
	}
}

// TestDelayedRetryCannotEraseANewerWrite: a write, then a second one based
// on it; the first write's delayed retry, with the If-Match it was sent
// with, gets 412, and the row keeps the second write.
func TestDelayedRetryCannotEraseANewerWrite(t *testing.T) {
	pool := notesPool(t)
	create(t, pool)
	firstIfMatch := must(t, `"1"`, "")
	v, err := update(pool, firstIfMatch, "ship to Oak Street")
	if err != nil || v != 2 {
		t.Fatalf("the first write: %d, %v", v, err)
	}
	if v, err = update(pool, must(t, v.ETag(), ""), "ship to Elm Street"); err != nil || v != 3 {
		t.Fatalf("the second write: %d, %v", v, err)
	}
	if _, err := update(pool, firstIfMatch, "ship to Oak Street"); status(err) != 412 {
		t.Fatalf("the first write's delayed retry: %v; want 412", err)
	}
	if body, v := current(t, pool); body != "ship to Elm Street" || v != 3 {
		t.Fatalf("the row holds %q at %d; want the second write at 3", body, v)
	}
}

// TestRacingCreatesOneWins: clients creating the same id under
// If-None-Match: * at once: one gets the row, every other 412.
func TestRacingCreatesOneWins(t *testing.T) {
	pool := notesPool(t)
	const clients = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, clients)
	for i := range clients {
		wg.Go(func() {
			<-start
			errs[i] = write(pool, func(tx pgx.Tx) error {
				_, err := notes.InsertTx(context.Background(), tx, must(t, "", "*"), []any{"acct_ada", "n1"}, map[string]any{"body": "client " + string(rune('a'+i))})
				return err
			})
		})
	}
	close(start)
	wg.Wait()
	created := 0
	for i, err := range errs {
		switch status(err) {
		case 0:
			created++
		case 412:
		default:
			t.Errorf("client %d: %v; want 201 or 412", i, err)
		}
	}
	if created != 1 {
		t.Fatalf("%d clients created the row; want 1 (%v)", created, errs)
	}
}

// TestWritesRefused: what each write answers to a request it cannot
// honour: a missing row is 404 whatever the preconditions, a write without
// the precondition it needs 428, a create under If-Match 412; a delete
// under an old ETag is 412 and under the current one deletes.
func TestWritesRefused(t *testing.T) {
	pool := notesPool(t)
	ctx := context.Background()
	key := []any{"acct_ada", "n1"}
	run := func(f func(tx pgx.Tx) error) int { return status(write(pool, f)) }
	for name, c := range map[string]struct {
		f    func(tx pgx.Tx) error
		want int
	}{
		"update of a missing row": {func(tx pgx.Tx) error {
			_, err := notes.UpdateTx(ctx, tx, must(t, "*", ""), key, map[string]any{"body": "x"})
			return err
		}, 404},
		"delete of a missing row": {func(tx pgx.Tx) error { return notes.DeleteTx(ctx, tx, must(t, `"1"`, ""), key) }, 404},
		"update without If-Match": {func(tx pgx.Tx) error {
			_, err := notes.UpdateTx(ctx, tx, idemcond.Preconditions{}, key, map[string]any{"body": "x"})
			return err
		}, 428},
		"delete without If-Match": {func(tx pgx.Tx) error { return notes.DeleteTx(ctx, tx, must(t, "", "*"), key) }, 428},
		"create without If-None-Match": {func(tx pgx.Tx) error {
			_, err := notes.InsertTx(ctx, tx, idemcond.Preconditions{}, key, map[string]any{"body": "x"})
			return err
		}, 428},
		"create under If-Match": {func(tx pgx.Tx) error {
			_, err := notes.InsertTx(ctx, tx, must(t, "*", "*"), key, map[string]any{"body": "x"})
			return err
		}, 412},
	} {
		if got := run(c.f); got != c.want {
			t.Errorf("%s: %d; want %d", name, got, c.want)
		}
	}
	create(t, pool)
	if _, err := update(pool, must(t, `"1"`, ""), "second"); err != nil {
		t.Fatal(err)
	}
	if got := run(func(tx pgx.Tx) error { return notes.DeleteTx(ctx, tx, must(t, `"1"`, ""), key) }); got != 412 {
		t.Fatalf("a delete under an old ETag: %d; want 412", got)
	}
	if got := run(func(tx pgx.Tx) error { return notes.DeleteTx(ctx, tx, must(t, `"2"`, ""), key) }); got != 0 {
		t.Fatalf("a delete under the current ETag: %d; want it done", got)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM notes`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows left, %v; want none", n, err)
	}
}

// TestTableNames: a name that is not a plain SQL name, or a key of the
// wrong length, is the caller's mistake: an error that is no refusal.
func TestTableNames(t *testing.T) {
	pool := notesPool(t)
	ctx := context.Background()
	for _, c := range []struct {
		table idemcond.Table
		key   []any
		cols  map[string]any
		want  string
	}{
		{idemcond.Table{Name: "notes; DROP TABLE notes", Key: []string{"account", "id"}}, []any{"a", "b"}, nil, "is not an unquoted SQL name"},
		{notes, []any{"a", "b"}, map[string]any{"body = 'x', id": 1}, "is not an unquoted SQL name"},
		{notes, []any{"a"}, nil, "1 key values for the key (account, id)"},
		{idemcond.Table{Name: "notes"}, nil, nil, "names no column"},
	} {
		err := write(pool, func(tx pgx.Tx) error {
			_, err := c.table.InsertTx(ctx, tx, must(t, "", "*"), c.key, c.cols)
			return err
		})
		if status(err) != -1 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error saying %q", c.table, err, c.want)
		}
	}
	shop := idemcond.Table{Name: dbtest.Schema(t) + ".notes", Key: []string{"id"}, Version: "rev"}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+shop.Name+` (id text PRIMARY KEY, rev bigint NOT NULL DEFAULT 7)`); err != nil {
		t.Fatal(err)
	}
	err := write(pool, func(tx pgx.Tx) error {
		v, err := shop.InsertTx(ctx, tx, must(t, "", "*"), []any{"n1"}, nil)
		if err == nil && v != 7 {
			t.Errorf("a schema-qualified table's new row: version %d; want its default, 7", v)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
