// Package directive silences findings with //idemgen:ignore.
package directive

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/api"
	"example.com/cardnet"
)

type Audited struct{ Pool *pgxpool.Pool }

var _ api.LocalPhases = (*Audited)(nil)

func (p *Audited) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	//idemgen:ignore the attempt log must survive the phase's rollback
	p.Pool.Exec(ctx, "INSERT INTO attempts VALUES (1)")
	p.Pool.Exec(ctx, "INSERT INTO attempts VALUES (2)") //idemgen:ignore as above, on its line

	// want +1 `^//idemgen:ignore needs a reason: say why the finding is safe, e.g. //idemgen:ignore <why>$`
	//idemgen:ignore
	p.Pool.Exec(ctx, "INSERT INTO attempts VALUES (3)") // want `tx-only`

	//idemgen:ignore a directive covers one statement only

	p.Pool.Exec(ctx, "INSERT INTO attempts VALUES (4)") // want `tx-only`

	// A trailing directive covers its own line, not the next one.
	p.Pool.Exec(ctx, "INSERT INTO attempts VALUES (5)") //idemgen:ignore the attempt log again
	p.Pool.Exec(ctx, "INSERT INTO attempts VALUES (6)") // want `tx-only`

	// A directive above a statement covers all of its lines.
	//idemgen:ignore the attempt log again
	p.Pool.Exec(ctx,
		"INSERT INTO attempts VALUES (7)")
	//idemgen:ignore the attempt log again
	_, _ = p.Pool.Exec(ctx, "INSERT INTO attempts VALUES ($1)",
		p.Pool.QueryRow(ctx, "SELECT 8"))
	p.Pool.Exec(ctx, "INSERT INTO attempts VALUES (9)") // want `tx-only`

	//idemgen:ignore the attempt log again, with a reason
	// that goes on for another line
	p.Pool.Exec(ctx, "INSERT INTO attempts VALUES (12)")

	// Above an if, a directive covers its header, not its body.
	//idemgen:ignore the attempt log again
	if _, err := p.Pool.Exec(ctx, "INSERT INTO attempts VALUES (10)"); err != nil {
		p.Pool.Exec(ctx, "INSERT INTO attempts VALUES (11)") // want `tx-only`
	}
	return nil
}

// Stamped sends the time on purpose: the card network ignores the amount
// of a retried charge.
type Stamped struct{ Cards *cardnet.Client }

var _ api.ForeignPhases = (*Stamped)(nil)

func (p *Stamped) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	//idemgen:ignore the card network keeps the first amount sent under a key
	_, err := p.Cards.Charge(ctx, key, cardnet.Request{
		Customer: request.Customer,
		Amount:   time.Now().Unix(),
	})
	if err != nil {
		return err
	}
	_, err = p.Cards.Charge(ctx, key, cardnet.Request{
		Customer: request.Customer,
		Amount:   time.Now().Unix(), // want `field Amount, sent with key by p.Cards.Charge, is computed from time.Now`
	})
	return err
}
