// Package escape holds local phases that let their transaction outlive
// them, and ones that do not.
package escape

import (
	"context"

	"github.com/jackc/pgx/v5"

	"example.com/api"
	"example.com/db"
)

var lastTx pgx.Tx

// Leaky keeps its tx and what it read from it.
type Leaky struct {
	last    pgx.Tx
	rows    []pgx.Rows
	rowCh   chan pgx.Row
	later   func()
	byName  map[string]pgx.Tx
	one     pgx.Rows
	row     pgx.Row
	q       *db.Queries
	kept    repo
	pending []pgx.Rows
}

type repo struct {
	tx pgx.Tx
	n  int64
}

var _ api.LocalPhases = (*Leaky)(nil)

func (p *Leaky) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	go func() {
		tx.Exec(ctx, "INSERT INTO audit VALUES (1)") // want `^Leaky.Record: tx-escape: tx \(the phase's transaction\) is used by a goroutine, which may run after the phase has returned, but the transaction ends when the phase returns; use it only within the phase$`
	}()
	p.last = tx // want `^Leaky.Record: tx-escape: tx \(the phase's transaction\) is stored in p.last, which outlives the phase, `
	lastTx = tx // want `tx \(the phase's transaction\) is stored in lastTx`
	rows, err := tx.Query(ctx, "SELECT id FROM a")
	if err != nil {
		return err
	}
	p.rows = append(p.rows, rows) // want `rows \(from tx.Query\) is appended to p.rows`
	row := tx.QueryRow(ctx, "SELECT 1")
	p.rowCh <- row // want `row \(from tx.QueryRow\) is sent on p.rowCh`
	byName := map[string]pgx.Tx{}
	byName["a"] = tx
	p.byName = byName                   // want `byName \(holds tx\) is stored in p.byName`
	p.later = func() { tx.Commit(ctx) } // want `tx \(the phase's transaction\) is stored in p.later`
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	go finish(ctx, sp)                             // want `sp \(from tx.Begin\) is used by a goroutine`
	p.one, err = tx.Query(ctx, "SELECT id FROM b") // want `^Leaky.Record: tx-escape: the pgx.Rows from tx.Query is stored in p.one, which outlives the phase, `
	if err != nil {
		return err
	}
	p.row = tx.QueryRow(ctx, "SELECT 2") // want `the pgx.Row from tx.QueryRow is stored in p.row`
	p.q = p.q.WithTx(tx)                 // want `the \*db.Queries from p.q.WithTx is stored in p.q,`
	var r repo
	r.tx = tx
	p.kept = r // want `r \(holds tx\) is stored in p.kept`
	var pending []pgx.Rows
	pending = append(pending, rows)
	p.pending = pending // want `pending \(holds rows\) is stored in p.pending`
	names := p.byName
	names["b"] = tx // want `tx \(the phase's transaction\) is stored in names\["b"\]`
	return nil
}

func finish(ctx context.Context, tx pgx.Tx) { tx.Commit(ctx) }

// Contained uses goroutines and closures that leave tx alone, and aliases
// tx only within the phase.
type Contained struct{}

func (Contained) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	amount := make(chan int64, 1)
	go func() { amount <- request.Amount * 2 }()
	state.Amount = <-amount
	t := tx
	rows, err := t.Query(ctx, "SELECT id FROM a")
	if err != nil {
		return err
	}
	defer rows.Close()
	defer func() { tx.Exec(ctx, "SELECT 1") }()
	insert := func() error {
		_, err := tx.Exec(ctx, "INSERT INTO a VALUES ($1)", state.Amount)
		return err
	}
	return insert()
}

var _ api.LocalPhases = Contained{}

// Local keeps tx, and what it read, in variables of its own: a struct, a
// slice, a map.
type Local struct{}

var _ api.LocalPhases = Local{}

func (Local) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	var r repo
	r.tx = tx
	rows, err := r.tx.Query(ctx, "SELECT id FROM a")
	if err != nil {
		return err
	}
	defer rows.Close()
	var all []pgx.Rows
	all = append(all, rows)
	byName := map[string]pgx.Tx{}
	byName["a"] = tx
	res := repo{tx: tx}
	res.n = int64(len(all) + len(byName))
	state.Amount = res.n
	p := &repo{}
	p.tx = tx
	return p.tx.QueryRow(ctx, "SELECT 1").Scan(&state.At)
}

// Kept stores tx and its rows in the state, which the engine keeps.
type Kept struct{}

var _ api.KeepPhases = Kept{}

func (Kept) Keep(ctx context.Context, tx pgx.Tx, request api.Request, state *api.KeepState) error {
	state.Tx = tx // want `tx \(the phase's transaction\) is stored in state.Tx`
	var err error
	state.Rows, err = tx.Query(ctx, "SELECT id FROM a") // want `the pgx.Rows from tx.Query is stored in state.Rows`
	return err
}
