package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Prune deletes records past their retention, at most batch rows per
// transaction, until none remain or ctx ends. It returns how many it deleted.
//
// Each batch locks its rows with SKIP LOCKED, so many processes can prune at
// once without waiting on each other, and a claim of the same key waits for
// at most one batch's transaction. A claimed record is deleted only once its
// lease has also expired, so a running execution is never pruned under its
// owner.
func (e *Engine) Prune(ctx context.Context, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	sql := `DELETE FROM ` + e.opts.Schema + `.records WHERE ctid IN (
    SELECT ctid FROM ` + e.opts.Schema + `.records
    WHERE expires_at <= now() AND (state = 'completed' OR lease_until <= now())
    ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`
	var total int64
	for {
		tag, err := e.pool.Exec(ctx, sql, batch)
		if err != nil {
			return total, fmt.Errorf("idem: prune: %w", err)
		}
		n := tag.RowsAffected()
		total += n
		if n > 0 {
			e.obs.Observe(Event{Kind: EventPruned, Duration: time.Duration(n)})
		}
		if n < int64(batch) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// resumer finishes an abandoned record of one operation from its stored
// request payload.
type resumer func(ctx context.Context, c *claim, payload []byte) (*Outcome, error)

// RegisterCompleter lets the background completer finish abandoned records
// of op (an operation with Complete: background). build turns the stored
// request payload back into the operation's phases.
func RegisterCompleter[S any](e *Engine, op *Operation, build func(payload []byte) ([]Phase[S], error)) {
	e.resume[op.ID] = func(ctx context.Context, c *claim, payload []byte) (*Outcome, error) {
		phases, err := build(payload)
		if err != nil {
			return nil, err
		}
		if err := checkPhases(phases); err != nil {
			return nil, err
		}
		return execute(ctx, e, c, phases)
	}
	e.ops = append(e.ops, op)
}

// CompleteAbandoned finds up to limit records of registered operations whose
// owner's lease expired, takes each over with a new owner token (the same
// fencing as a retry's takeover), and runs its remaining phases from the
// stored request. It returns how many it completed. Records another process
// is already completing are skipped.
func (e *Engine) CompleteAbandoned(ctx context.Context, limit int) (int, error) {
	if len(e.ops) == 0 {
		return 0, nil
	}
	ids := make([]string, 0, len(e.ops))
	byID := map[string]*Operation{}
	for _, op := range e.ops {
		ids = append(ids, op.ID)
		byID[op.ID] = op
	}
	rows, err := e.pool.Query(ctx, `SELECT namespace, scope, key, operation, owner_token, request
FROM `+e.opts.Schema+`.records
WHERE state = 'claimed' AND background AND lease_until <= now() AND operation = ANY($1)
ORDER BY lease_until LIMIT $2`, ids, limit)
	if err != nil {
		return 0, fmt.Errorf("idem: completer: %w", err)
	}
	type abandoned struct {
		ns, scope, key, op string
		owner              [16]byte
		payload            []byte
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (abandoned, error) {
		var a abandoned
		err := r.Scan(&a.ns, &a.scope, &a.key, &a.op, &a.owner, &a.payload)
		return a, err
	})
	if err != nil {
		return 0, fmt.Errorf("idem: completer: %w", err)
	}
	done := 0
	var errs []error
	for _, a := range found {
		op := byID[a.op]
		c := &claim{op: op, policy: op.Policy.withDefaults(), ns: a.ns, scope: a.scope, key: a.key, token: newToken()}
		ok, err := e.q.takeover(ctx, e.pool, c, &a.owner)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue // a retry or another completer got there first
		}
		e.obs.Observe(Event{Kind: EventTakeover, Operation: op.ID})
		if _, err := e.resume[op.ID](ctx, c, a.payload); err != nil {
			errs = append(errs, fmt.Errorf("%s key %q: %w", op.ID, a.key, err))
			continue
		}
		e.obs.Observe(Event{Kind: EventCompleterRun, Operation: op.ID})
		done++
	}
	return done, errors.Join(errs...)
}

// RunCompleter calls CompleteAbandoned every interval until ctx ends,
// logging errors.
func (e *Engine) RunCompleter(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := e.CompleteAbandoned(ctx, 100); err != nil && ctx.Err() == nil {
			e.log.Warn("idem: completer", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

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
	ExpiresIn     string          `json:"expires_in"`
	Status        *int            `json:"response_status,omitempty"`
}

// Inspect returns the record for (namespace, scope, key), or pgx.ErrNoRows.
func (e *Engine) Inspect(ctx context.Context, namespace, scope, key string) (*RecordInfo, error) {
	var r RecordInfo
	var owner *string
	var lease *float64
	var age, expires float64
	err := e.pool.QueryRow(ctx, `SELECT namespace, scope, key, operation, state, recovery_point, phase_state,
    owner_token::text, extract(epoch FROM lease_until - now())::float8, attempts,
    extract(epoch FROM now() - created_at)::float8, extract(epoch FROM expires_at - now())::float8, response_status
FROM `+e.opts.Schema+`.records WHERE namespace = $1 AND scope = $2 AND key = $3`, namespace, scope, key).
		Scan(&r.Namespace, &r.Scope, &r.Key, &r.Operation, &r.State, &r.RecoveryPoint, &r.PhaseState,
			&owner, &lease, &r.Attempts, &age, &expires, &r.Status)
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
