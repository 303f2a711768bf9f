// Package handles holds local phases that reach the database through
// handles of the service's own: sqlc's DBTX interface and Queries, and
// structs holding a pool beside tx.
package handles

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/api"
	"example.com/db"
)

// Wired got its handles from the service's pool.
type Wired struct {
	DB   db.DBTX
	Q    *db.Queries
	Pool *pgxpool.Pool
}

var _ api.LocalPhases = (*Wired)(nil)

func (w *Wired) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	if _, err := w.DB.Exec(ctx, "INSERT INTO a VALUES (1)"); err != nil { // want `^Wired.Record: tx-only: w.DB.Exec goes through a db.DBTX not built on the phase's tx, outside the phase's transaction: it does not see the phase's writes, and what it writes survives the phase's rollback and is written again by the retry; call tx.Exec instead$`
		return err
	}
	if err := w.Q.InsertPayment(ctx, request.Amount); err != nil { // want `^Wired.Record: tx-only: w.Q.InsertPayment goes through a \*db.Queries not built on the phase's tx, .*; call w.Q.WithTx\(tx\).InsertPayment instead$`
		return err
	}
	u := struct {
		tx   pgx.Tx
		pool *pgxpool.Pool
	}{tx, w.Pool}
	if _, err := u.tx.Exec(ctx, "INSERT INTO b VALUES (1)"); err != nil {
		return err
	}
	if _, err := u.pool.Exec(ctx, "INSERT INTO c VALUES (1)"); err != nil { // want `u.pool.Exec goes through a \*pgxpool.Pool`
		return err
	}
	balance, err := w.Q.GetBalance(ctx, request.Customer) // want `w.Q.GetBalance goes through a \*db.Queries`
	state.Amount = balance
	return err
}

// Bound builds its handles on tx.
type Bound struct{ Q *db.Queries }

var _ api.LocalPhases = (*Bound)(nil)

func (b *Bound) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	q := db.New(tx)
	if err := q.InsertPayment(ctx, request.Amount); err != nil {
		return err
	}
	if err := b.Q.WithTx(tx).InsertPayment(ctx, request.Amount); err != nil {
		return err
	}
	if err := db.New(tx).InsertPayment(ctx, request.Amount); err != nil {
		return err
	}
	var dbtx db.DBTX = tx
	if _, err := dbtx.Exec(ctx, "INSERT INTO a VALUES (1)"); err != nil {
		return err
	}
	if _, err := db.DBTX(tx).Exec(ctx, "INSERT INTO b VALUES (1)"); err != nil {
		return err
	}
	var later db.DBTX
	later = tx
	wq := b.Q.WithTx(tx)
	if _, err := wq.GetBalance(ctx, request.Customer); err != nil {
		return err
	}
	return later.QueryRow(ctx, "SELECT 1").Scan(&state.Amount)
}
