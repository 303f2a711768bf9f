// Package fix is rewritten by tx-only's suggested fixes.
package fix

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/api"
	"example.com/db"
)

type Recorder struct {
	Pool *pgxpool.Pool
	Conn *pgx.Conn
}

var _ api.LocalPhases = (*Recorder)(nil)

func (p *Recorder) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	if _, err := p.Pool.Exec(ctx, "INSERT INTO a VALUES ($1)", request.Amount); err != nil { // want `tx-only`
		return err
	}
	rows, err := p.Conn.Query(ctx, "SELECT id FROM a") // want `tx-only`
	if err != nil {
		return err
	}
	rows.Close()
	// pgx.Tx has no BeginTx: no fix.
	if _, err := p.Pool.BeginTx(ctx, pgx.TxOptions{}); err != nil { // want `tx-only: p.Pool.BeginTx goes through a \*pgxpool.Pool, .*; use tx$`
		return err
	}
	return p.Pool.QueryRow(ctx, "SELECT 1").Scan(&state.Amount) // want `tx-only`
}

// Queued reaches the database through sqlc's Queries and DBTX, made on the
// pool, and through a transaction of the pool.
type Queued struct {
	Q    *db.Queries
	DB   db.DBTX
	Pool *pgxpool.Pool
}

var _ api.LocalPhases = (*Queued)(nil)

func (p *Queued) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	if err := p.Q.InsertPayment(ctx, request.Amount); err != nil { // want `tx-only`
		return err
	}
	if _, err := p.DB.Exec(ctx, "INSERT INTO a VALUES (1)"); err != nil { // want `tx-only`
		return err
	}
	// The tx here is the callback's: no fix.
	return pgx.BeginFunc(ctx, p.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO b VALUES (1)") // want `tx-only`
		return err
	})
}
