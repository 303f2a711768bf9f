package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
)

// ReceiveCardnetEventState is empty: the operation has a single phase.
type ReceiveCardnetEventState struct{}

// ReceiveCardnetEventImpl applies the card network's events. The generated
// handler has already verified the delivery's signature (the sender is the
// key's scope) and claimed the event's id; a second delivery of the event
// never reaches Apply: it gets the stored answer.
type ReceiveCardnetEventImpl struct{}

var _ ReceiveCardnetEventPhases = (*ReceiveCardnetEventImpl)(nil)

// Apply records the event in card_events and, for charge.succeeded, marks
// the payment settled, in the transaction that stores the answer. An event
// of a type it does not know is refused (400) and released. An event
// about a charge no payment carries yet (the network's webhook can arrive
// before the payment's own execution records its charge) is refused with
// 503 and released: nothing is recorded, and the network delivers it again.
func (p *ReceiveCardnetEventImpl) Apply(ctx context.Context, tx pgx.Tx, request ReceiveCardnetEventRequestObject, state *ReceiveCardnetEventState) (ReceiveCardnetEventResponseObject, error) {
	ev := request.Body
	if !ev.Type.Valid() {
		return nil, idem.Release(echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("unknown event type %q", ev.Type)))
	}
	var paymentID int64
	// By account and charge: the account (the charge's, echoed by the
	// network) is what the payments are keyed and distributed by, so that
	// on Citus this is one shard's statement, on the shard of the event's
	// record (the operation's placement).
	acct := ev.Charge.Account
	err := tx.QueryRow(ctx, `SELECT id FROM payments WHERE account = $1 AND charge_id = $2 FOR UPDATE`, acct, ev.Charge.Id).Scan(&paymentID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, idem.Release(echo.NewHTTPError(http.StatusServiceUnavailable,
			fmt.Sprintf("charge %s is not known yet (its payment has not finished); deliver %s again later", ev.Charge.Id, ev.Id)))
	case err != nil:
		return nil, err
	}
	if ev.Type == ChargeSucceeded {
		// The first settlement's time stays. Written without coalesce(..,
		// now()), which Citus refuses in an UPDATE of its tables.
		if _, err := tx.Exec(ctx, `UPDATE payments SET settled_at = now() WHERE account = $1 AND id = $2 AND settled_at IS NULL`, acct, paymentID); err != nil {
			return nil, err
		}
	}
	var appliedAt time.Time
	if err := tx.QueryRow(ctx, `INSERT INTO card_events (account, event_id, type, charge_id, payment_id, amount)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING applied_at`, acct, ev.Id, string(ev.Type), ev.Charge.Id, paymentID, ev.Charge.Amount).Scan(&appliedAt); err != nil {
		return nil, err
	}
	return ReceiveCardnetEvent200JSONResponse{Event: ev.Id, Type: string(ev.Type), PaymentId: paymentID, AppliedAt: appliedAt.UTC()}, nil
}
