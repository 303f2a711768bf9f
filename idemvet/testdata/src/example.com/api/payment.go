package api

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/cardnet"
)

// Payment implements PaymentPhases in the interface's own package.
type Payment struct {
	Pool  *pgxpool.Pool
	Cards *cardnet.Client
}

var _ PaymentPhases = (*Payment)(nil)

func (p *Payment) Record(ctx context.Context, tx pgx.Tx, request Request, state *State) error {
	state.Amount = request.Amount
	return tx.QueryRow(ctx, "INSERT INTO payments (amount) VALUES ($1) RETURNING id", request.Amount).Scan(&state.ChargeID)
}

func (p *Payment) Charge(ctx context.Context, key string, request Request, state *State) error { // want Charge:"reaches the network via \\(\\*http.Client\\).Do"
	ch, err := p.Cards.Charge(ctx, key, cardnet.Request{Amount: state.Amount, Customer: request.Customer})
	state.ChargeID = ch.ID
	return err
}

func (p *Payment) Finish(ctx context.Context, tx pgx.Tx, request Request, state *State) (Response, error) {
	_, err := p.Pool.Exec(ctx, "UPDATE payments SET status = 'done'") // want `^Payment.Finish: tx-only: p.Pool.Exec goes through a \*pgxpool.Pool, outside the phase's transaction: it does not see the phase's writes, and what it writes survives the phase's rollback and is written again by the retry; call tx.Exec instead$`
	return Response{ID: state.ChargeID}, err
}

// Closer implements CloserPhases, which is no phase interface, and
// OwnPhases, which idemgen did not generate: neither is checked.
type Closer struct{ Pool *pgxpool.Pool }

func (c *Closer) Apply(ctx context.Context, tx pgx.Tx, request Request, state *State) error { // want Apply:"changes state: writes to the database via \\(\\*pgxpool.Pool\\).Exec"
	_, err := c.Pool.Exec(ctx, "DELETE FROM payments")
	return err
}

func (c *Closer) Close() error { return nil }

type OwnPhases interface {
	Apply(ctx context.Context, tx pgx.Tx, request Request, state *State) error
}
