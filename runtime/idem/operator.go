package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
)

// RecordInfo is what an operator sees of one record.
type RecordInfo struct {
	Namespace     string          `json:"namespace"`
	Scope         string          `json:"scope"`
	Key           string          `json:"key"`
	Operation     string          `json:"operation"`
	State         string          `json:"state"`
	RecoveryPoint string          `json:"recovery_point"`
	PhaseState    json.RawMessage `json:"phase_state,omitempty"`
	Owner         string          `json:"owner,omitempty"`
	LeaseLeft     string          `json:"lease_left,omitempty"` // negative once expired
	Attempts      int             `json:"attempts"`
	Age           string          `json:"age"`
	ExpiresIn     string          `json:"expires_in"` // negative once past retention
	Status        *int            `json:"response_status,omitempty"`
	// Stuck: claimed, no live owner, and past retention. Such a record is
	// never pruned (a committed phase would run again); it waits for a
	// retry, the completer, or an operator's Resolve.
	Stuck bool `json:"stuck,omitempty"`
}

// recordColumns is what RecordInfo is scanned from, in scanRecordInfo's order.
const recordColumns = `namespace, scope, key, operation, state, recovery_point, phase_state,
    owner_token::text, extract(epoch FROM lease_until - now())::float8, attempts,
    extract(epoch FROM now() - created_at)::float8, extract(epoch FROM expires_at - now())::float8, response_status,
    (state = 'claimed' AND lease_until <= now() AND expires_at <= now())`

func scanRecordInfo(row pgx.Row) (*RecordInfo, error) {
	var r RecordInfo
	var owner *string
	var lease *float64
	var age, expires float64
	err := row.Scan(&r.Namespace, &r.Scope, &r.Key, &r.Operation, &r.State, &r.RecoveryPoint, &r.PhaseState,
		&owner, &lease, &r.Attempts, &age, &expires, &r.Status, &r.Stuck)
	if err != nil {
		return nil, err
	}
	secs := func(s float64) string {
		return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
	}
	if owner != nil {
		r.Owner = *owner
	}
	if lease != nil {
		r.LeaseLeft = secs(*lease)
	}
	r.Age, r.ExpiresIn = secs(age), secs(expires)
	return &r, nil
}

// Inspect returns the record for (namespace, scope, key), or pgx.ErrNoRows.
func (e *Engine) Inspect(ctx context.Context, namespace, scope, key string) (*RecordInfo, error) {
	return scanRecordInfo(e.pool.QueryRow(ctx, `SELECT `+recordColumns+`
FROM `+e.opts.Schema+`.records WHERE namespace = $1 AND scope = $2 AND key = $3`, namespace, scope, key))
}

// Abandoned lists up to limit claimed records whose owner's lease has
// expired, oldest lease first: executions that died and that no retry has
// resumed yet. With stuckOnly, only those past their retention.
func (e *Engine) Abandoned(ctx context.Context, stuckOnly bool, limit int) ([]*RecordInfo, error) {
	rows, err := e.pool.Query(ctx, `SELECT `+recordColumns+`
FROM `+e.opts.Schema+`.records
WHERE state = 'claimed' AND lease_until <= now() AND (NOT $1 OR expires_at <= now())
ORDER BY lease_until LIMIT $2`, stuckOnly, limit)
	if err != nil {
		return nil, fmt.Errorf("idem: abandoned: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*RecordInfo, error) { return scanRecordInfo(r) })
}

// countStuck counts the records Abandoned(ctx, true, ...) would list.
func (e *Engine) countStuck(ctx context.Context) (int64, error) {
	var n int64
	err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.opts.Schema+`.records
WHERE expires_at <= now() AND state = 'claimed' AND lease_until <= now()`).Scan(&n)
	return n, err
}

// Resolution is an operator's decision about an abandoned record.
type Resolution struct {
	// Delete frees the key. Whatever the record's committed phases did
	// stays done, and a retry with the key executes from the start: choose
	// it only when those effects were undone or never happened.
	Delete bool
	// Otherwise the record is completed with a problem response: Status
	// (400 to 599, default 500) and Detail, replayed to every retry for
	// Retention (default DefaultRetention) from now.
	Status    int
	Detail    string
	Retention time.Duration
}

// ErrNotAbandoned is returned by Resolve for a record that is completed, or
// claimed by an owner whose lease is live.
var ErrNotAbandoned = errors.New("idem: the record is not abandoned (completed, or its owner's lease is live)")

// Resolve settles one abandoned record deliberately (see Resolution). It
// refuses a record that is completed or has a live owner, and returns
// pgx.ErrNoRows when there is no record.
func (e *Engine) Resolve(ctx context.Context, namespace, scope, key string, r Resolution) error {
	abandoned := ` WHERE namespace = $1 AND scope = $2 AND key = $3 AND state = 'claimed' AND lease_until <= now()`
	var tag interface{ RowsAffected() int64 }
	var err error
	if r.Delete {
		tag, err = e.pool.Exec(ctx, `DELETE FROM `+e.opts.Schema+`.records`+abandoned, namespace, scope, key)
	} else {
		if r.Status == 0 {
			r.Status = http.StatusInternalServerError
		}
		if r.Status < 400 || r.Status > 599 {
			return fmt.Errorf("idem: resolve: status %d is not a 4xx or 5xx", r.Status)
		}
		if r.Retention <= 0 {
			r.Retention = DefaultRetention
		}
		body, merr := json.Marshal(Problem{Type: ProblemTypeBase + "resolved-by-operator",
			Title: "An operator settled this request", Status: r.Status, Detail: r.Detail})
		if merr != nil {
			return merr
		}
		headers := `{"Content-Type":["application/problem+json"]}`
		tag, err = e.pool.Exec(ctx, `UPDATE `+e.opts.Schema+`.records SET state = 'completed', owner_token = NULL,
    lease_until = NULL, response_status = $4, response_headers = $5, response_body = $6, body_omitted = false,
    request = NULL, expires_at = now() + $7::bigint * interval '1 microsecond'`+abandoned,
			namespace, scope, key, r.Status, headers, body, micros(r.Retention))
	}
	if err != nil {
		return fmt.Errorf("idem: resolve: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := e.Inspect(ctx, namespace, scope, key); err != nil {
		return err
	}
	return ErrNotAbandoned
}
