// Package pgx is a stub of github.com/jackc/pgx/v5 with the method sets
// idemvet looks at.
package pgx

import (
	"context"
	"errors"
)

type CommandTag struct{ s string }

type Identifier []string

type CopyFromSource interface{ Next() bool }

type Batch struct{}

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
	Exec() (CommandTag, error)
	Close() error
}

type Tx interface {
	Begin(ctx context.Context) (Tx, error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	CopyFrom(ctx context.Context, tableName Identifier, columnNames []string, rowSrc CopyFromSource) (int64, error)
	SendBatch(ctx context.Context, b *Batch) BatchResults
	Prepare(ctx context.Context, name, sql string) (*StatementDescription, error)
	Exec(ctx context.Context, sql string, arguments ...any) (CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) Row
	Conn() *Conn
}

type Conn struct{}

func (c *Conn) Begin(ctx context.Context) (Tx, error) { return nil, nil }

func (c *Conn) Exec(ctx context.Context, sql string, arguments ...any) (CommandTag, error) {
	return CommandTag{}, nil
}

func (c *Conn) Query(ctx context.Context, sql string, args ...any) (Rows, error) { return nil, nil }

func (c *Conn) QueryRow(ctx context.Context, sql string, args ...any) Row { return nil }
