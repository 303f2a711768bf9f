// Package db is what sqlc generates for pgx/v5: queries run on a DBTX,
// which a pool and a transaction both are, and WithTx binds them to a
// transaction.
package db

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

type DBTX interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
}

func New(db DBTX) *Queries {
	return &Queries{db: db}
}

type Queries struct {
	db DBTX
}

func (q *Queries) WithTx(tx pgx.Tx) *Queries {
	return &Queries{db: tx}
}

func (q *Queries) InsertPayment(ctx context.Context, amount int64) error {
	_, err := q.db.Exec(ctx, "INSERT INTO payments (amount) VALUES ($1)", amount)
	return err
}

func (q *Queries) GetBalance(ctx context.Context, customer string) (int64, error) {
	var balance int64
	err := q.db.QueryRow(ctx, "SELECT balance FROM accounts WHERE customer = $1", customer).Scan(&balance)
	return balance, err
}
