// Package escape holds local phases that let their transaction outlive
// them, and one that does not.
package escape

import (
	"context"

	"github.com/jackc/pgx/v5"

	"example.com/api"
)

var lastTx pgx.Tx

// Leaky keeps its tx and what it read from it.
type Leaky struct {
	last  pgx.Tx
	rows  []pgx.Rows
	rowCh chan pgx.Row
	later func()
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
	byName["a"] = tx                    // want `stored in byName\["a"\]`
	p.later = func() { tx.Commit(ctx) } // want `tx \(the phase's transaction\) is stored in p.later`
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	go finish(ctx, sp) // want `sp \(from tx.Begin\) is used by a goroutine`
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
