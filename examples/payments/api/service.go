package api

import (
	"context"
	_ "embed"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/runtime/idem"
)

//go:embed schema.sql
var schema string

// Migrate creates the example's business tables (idempotently).
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// One migrator at a time when several processes start together.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('payments.migrate'))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, schema)
		return err
	})
}

// Service holds what the handlers and phases need.
type Service struct {
	Pool  *pgxpool.Pool
	Cards *cardnet.Client
	// UnsafeFreshChargeKeys: see CreatePaymentImpl.UnsafeFreshKeys.
	UnsafeFreshChargeKeys bool
}

// Phases returns the phase implementations for Register.
func (s *Service) Phases() Phases {
	return Phases{
		CreatePayment: &CreatePaymentImpl{Cards: s.Cards, UnsafeFreshKeys: s.UnsafeFreshChargeKeys},
		CreateRefund:  &CreateRefundImpl{},

		ReceiveCardnetEvent: &ReceiveCardnetEventImpl{},
	}
}

type accountKey struct{}

// Account returns the account a request or an execution acts for. In a
// phase it is the call's scope (the principal the key is scoped to), which
// the engine provides on the request path and in the background completer
// alike; elsewhere, the account Authenticate put in the request's context.
func Account(ctx context.Context) string {
	if call := idem.ExecutionFrom(ctx); call != nil {
		return call.Scope
	}
	a, _ := ctx.Value(accountKey{}).(string)
	return a
}

// WebhookRoute is the card network's webhook receiver. Its requests are
// authenticated by their signature (the generated handler verifies it with
// Runtime.Senders["cardnet"]), not by a bearer token.
const WebhookRoute = "/webhooks/cardnet"

// Authenticate is the echo middleware that takes the account from
// "Authorization: Bearer <account>" (a stand-in for real authentication) and
// answers 401 without one. It leaves WebhookRoute to its signature.
func Authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Path() == WebhookRoute {
			return next(c)
		}
		acct, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
		acct = strings.TrimSpace(acct)
		if !ok || acct == "" {
			return echo.NewHTTPError(401, "send Authorization: Bearer <account>")
		}
		r := c.Request()
		c.SetRequest(r.WithContext(context.WithValue(r.Context(), accountKey{}, acct)))
		return next(c)
	}
}

// Principal is the idempotency scope resolver: keys are per account.
func Principal(c echo.Context) (string, error) { return Account(c.Request().Context()), nil }

// Placement maps a principal to the value its records are placed by: the
// account, which the business tables are keyed and, on Citus, distributed
// by (schema.sql), so that a request's record and rows share a shard.
func Placement(principal string) (string, error) { return principal, nil }

func problem(status int, kind, title, detail string) Problem {
	return Problem{Type: "urn:payments:problem:" + kind, Title: title, Status: status, Detail: &detail}
}
