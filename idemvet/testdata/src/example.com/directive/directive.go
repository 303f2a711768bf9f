// Package directive silences findings with //idemgen:ignore.
package directive

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/api"
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

	//idemgen:ignore a directive covers one line only

	p.Pool.Exec(ctx, "INSERT INTO attempts VALUES (4)") // want `tx-only`
	return nil
}
