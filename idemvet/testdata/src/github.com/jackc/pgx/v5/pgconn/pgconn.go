// Package pgconn is a stub of github.com/jackc/pgx/v5/pgconn.
package pgconn

type CommandTag struct{ s string }
