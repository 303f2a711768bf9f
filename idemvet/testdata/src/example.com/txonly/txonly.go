// Package txonly holds local and final phases, implemented outside the
// package of their interfaces, that reach the database with and without
// their tx.
package txonly

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/api"
)

var db *sql.DB

// Pooled writes through everything but its tx.
type Pooled struct{ Pool *pgxpool.Pool }

var _ api.LocalPhases = (*Pooled)(nil)

func (p *Pooled) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	if _, err := p.Pool.Exec(ctx, "INSERT INTO a VALUES (1)"); err != nil { // want `^Pooled.Record: tx-only: p.Pool.Exec goes through a \*pgxpool.Pool, .*; call tx.Exec instead$`
		return err
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO b VALUES (1)"); err != nil { // want `^Pooled.Record: tx-only: db.ExecContext goes through a \*sql.DB, .*; use tx$`
		return err
	}
	read := func() error {
		return p.Pool.QueryRow(ctx, "SELECT 1").Scan(&state.Amount) // want `p.Pool.QueryRow goes through a \*pgxpool.Pool`
	}
	if err := read(); err != nil {
		return err
	}
	conn, err := p.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "INSERT INTO c VALUES (1)"); err != nil { // want `conn.Exec goes through a \*pgxpool.Conn`
		return err
	}
	other, err := p.Pool.Begin(ctx) // want `p.Pool.Begin goes through a \*pgxpool.Pool`
	if err != nil {
		return err
	}
	exec := other.Exec // want `^Pooled.Record: tx-only: other.Exec goes through a pgx.Tx that is not the phase's tx, .*; call tx.Exec instead$`
	_, err = exec(ctx, "INSERT INTO d VALUES (1)")
	return err
}

// Blind has no name for its tx.
type Blind struct{ Pool *pgxpool.Pool }

func (b Blind) Finish(ctx context.Context, _ pgx.Tx, request api.Request, state *api.State) (api.Response, error) {
	_, err := b.Pool.Exec(ctx, "UPDATE a SET done = true") // want `^Blind.Finish: tx-only: b.Pool.Exec goes through a \*pgxpool.Pool, .*; name the phase's tx parameter and use it$`
	return api.Response{}, err
}

var _ api.FinalPhases = Blind{}

// Careful does everything through its tx, a savepoint begun from it, and
// its connection.
type Careful struct{ Pool *pgxpool.Pool }

func (c *Careful) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	if _, err := tx.Exec(ctx, "INSERT INTO a VALUES ($1)", request.Amount); err != nil {
		return err
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := sp.Exec(ctx, "INSERT INTO b VALUES (1)"); err != nil {
		_ = sp.Rollback(ctx)
	} else if err := sp.Commit(ctx); err != nil {
		return err
	}
	if _, err := tx.Conn().Exec(ctx, "SET LOCAL lock_timeout = '1s'"); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, "SELECT id FROM a")
	if err != nil {
		return err
	}
	defer rows.Close()
	return tx.QueryRow(ctx, "SELECT 1").Scan(&state.Amount)
}

// helper is no phase: it may use the pool.
func helper(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "VACUUM")
	return err
}

// Nested runs statements in callbacks given its tx (pgx.BeginFunc's
// savepoint, a helper's, a closure of its own) and in a savepoint a helper
// begins from it: all of them are the phase's transaction.
type Nested struct{ Pool *pgxpool.Pool }

var _ api.LocalPhases = (*Nested)(nil)

func (n *Nested) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error { // want Record:"calls out of sight via the function value fn"
	if err := withSavepoint(ctx, tx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO a VALUES (1)")
		return err
	}); err != nil {
		return err
	}
	if err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		return sp.QueryRow(ctx, "SELECT 1").Scan(&state.Amount)
	}); err != nil {
		return err
	}
	insert := func(t pgx.Tx) error {
		_, err := t.Exec(ctx, "INSERT INTO b VALUES (1)")
		return err
	}
	if err := insert(tx); err != nil {
		return err
	}
	sp, err := beginSP(ctx, tx)
	if err != nil {
		return err
	}
	if _, err := sp.Exec(ctx, "INSERT INTO c VALUES (1)"); err != nil {
		return err
	}
	return sp.Commit(ctx)
}

// Detached runs its callback in a transaction of the pool: the callback's
// tx is not the phase's, whatever its name.
type Detached struct{ Pool *pgxpool.Pool }

var _ api.LocalPhases = (*Detached)(nil)

func (d *Detached) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	insert := func(t pgx.Tx) error {
		_, err := t.Exec(ctx, "INSERT INTO b VALUES (1)") // want `^Detached.Record: tx-only: t.Exec goes through a pgx.Tx that is not the phase's tx, .*; call tx.Exec instead$`
		return err
	}
	if err := pgx.BeginFunc(ctx, d.Pool, insert); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO a VALUES (1)") // want `^Detached.Record: tx-only: tx.Exec goes through a pgx.Tx that is not the phase's tx, .*; use the phase's tx \(the name tx here is another variable\)$`
		return err
	})
}

func withSavepoint(ctx context.Context, tx pgx.Tx, fn func(pgx.Tx) error) error { // want withSavepoint:"calls out of sight via the function value fn"
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(sp); err != nil {
		_ = sp.Rollback(ctx)
		return err
	}
	return sp.Commit(ctx)
}

func beginSP(ctx context.Context, tx pgx.Tx) (pgx.Tx, error) { return tx.Begin(ctx) }
