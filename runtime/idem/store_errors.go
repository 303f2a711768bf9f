package idem

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// storeError is an error of one of the store's statements: the step of
// the protocol it served (claim, read, takeover, commit, release, ...)
// and the statement's name (its block in sql/, or BEGIN, COMMIT, a
// connection), so that the one log line of a store error says what
// failed, not only that something did.
type storeError struct {
	op   string // the protocol's step
	stmt string // the statement's name
	err  error
}

func (e *storeError) Error() string {
	return "idem: store: " + e.op + " (" + e.stmt + "): " + e.err.Error()
}

func (e *storeError) Unwrap() error { return e.err }

// wrapStore wraps a non-nil err of statement stmt in step op, keeping a
// storeError already made (the innermost statement is the one that failed).
func wrapStore(op, stmt string, err error) error {
	if err == nil {
		return nil
	}
	var se *storeError
	if errors.As(err, &se) {
		return err
	}
	return &storeError{op: op, stmt: stmt, err: err}
}

// deterministic reports an error the server will give again for the same
// statement, whatever the retry: the statement or the schema is wrong for
// this server (a feature Citus does not support, an object or setting that
// is not there, a syntax error, a privilege missing, a wrong type). Such
// an error is no outage: nothing answers it but an operator, so a client
// is not told to retry (storeFailed). A stale prepared statement is not
// one (stale): preparing it again fixes it.
func deterministic(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || stale(err) {
		return false
	}
	switch pe.Code[:2] {
	case "0A", // feature_not_supported
		"42", // syntax_error_or_access_rule_violation: undefined objects, privileges, types
		"2B", // dependent_privilege_descriptors_still_exist
		"3F", // invalid_schema_name
		"22": // data_exception: a value the statement cannot take
		return true
	}
	return false
}

// storeFailed is the answer to a store error on the request path, logged
// once here with the operation, the step, the statement, the SQLSTATE and
// the server's message: 503 with Retry-After when the store may answer a
// retry (it did not answer, or answered with a transient error), and a 500
// that says retrying does not help when the error is deterministic.
func (e *Engine) storeFailed(ctx context.Context, op *Operation, step string, err error) *Error {
	e.logStoreError(ctx, slog.LevelError, op.ID, step, err)
	if deterministic(err) {
		return &Error{Kind: idemtype.KindFailed, Err: err,
			Detail: "the idempotency store refused the engine's statement (" + step + "); retrying does not help until an operator fixes the store"}
	}
	return &Error{Kind: idemtype.KindUnavailable, RetryAfter: time.Second, Err: err,
		Detail: "the idempotency store did not answer (" + step + ")"}
}

// logStoreError logs err, a store error of operation in step, with what
// says what failed.
func (e *Engine) logStoreError(ctx context.Context, level slog.Level, operation, step string, err error) {
	e.log.LogAttrs(ctx, level, "idem: store error", storeAttrs(append(make([]slog.Attr, 0, 8),
		slog.String("operation", operation), slog.String("step", step)), err)...)
}

// storeAttrs appends to attrs what err says of the statement that failed:
// its name, its SQLSTATE and the server's message (and detail), whether it
// is deterministic, and err itself.
func storeAttrs(attrs []slog.Attr, err error) []slog.Attr {
	var se *storeError
	if errors.As(err, &se) {
		attrs = append(attrs, slog.String("statement", se.stmt))
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		msg := pe.Message
		if pe.Detail != "" {
			msg += ": " + pe.Detail
		}
		attrs = append(attrs, slog.String("sqlstate", pe.Code), slog.String("message", msg),
			slog.Bool("deterministic", deterministic(err)))
	}
	return append(attrs, slog.String("err", strings.TrimPrefix(err.Error(), "idem: ")))
}
