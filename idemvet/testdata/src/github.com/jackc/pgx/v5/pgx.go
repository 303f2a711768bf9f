// Package pgx is a stub of github.com/jackc/pgx/v5 with the method sets
// idemvet looks at.
package pgx

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

type Identifier []string

type CopyFromSource interface{ Next() bool }

type Batch struct{}

type QueuedQuery struct{}

// Queue adds a statement to the batch, which SendBatch sends.
func (b *Batch) Queue(query string, arguments ...any) *QueuedQuery { return nil }

type TxOptions struct{}

type StatementDescription struct{}

var ErrNoRows = errors.New("no rows in result set")

type Rows interface {
	Close()
	Err() error
	Next() bool
	Scan(dest ...any) error
}

type Row interface {
	Scan(dest ...any) error
}

type BatchResults interface {
	Exec() (pgconn.CommandTag, error)
	Close() error
}

type Tx interface {
	Begin(ctx context.Context) (Tx, error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	CopyFrom(ctx context.Context, tableName Identifier, columnNames []string, rowSrc CopyFromSource) (int64, error)
	SendBatch(ctx context.Context, b *Batch) BatchResults
	Prepare(ctx context.Context, name, sql string) (*StatementDescription, error)
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) Row
	Conn() *Conn
}

type Conn struct{}

func (c *Conn) Begin(ctx context.Context) (Tx, error) { return nil, nil }

func (c *Conn) Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, nil
}

func (c *Conn) Query(ctx context.Context, sql string, args ...any) (Rows, error) { return nil, nil }

func (c *Conn) QueryRow(ctx context.Context, sql string, args ...any) Row { return nil }

// BeginFunc runs fn in a transaction begun on db (a pseudo-nested one, a
// savepoint, when db is a Tx), committing when fn returns nil.
func BeginFunc(ctx context.Context, db interface {
	Begin(ctx context.Context) (Tx, error)
}, fn func(Tx) error) error {
	return nil
}
