package idem

import (
	"context"
	"encoding/json"
	"fmt"
)

// RecordInfo is what an operator sees of one record. A completed record
// keeps only what a replay needs (migration 005): its operation, recovery
// point, phase state, attempts and age are empty.
type RecordInfo struct {
	Namespace     string          `json:"namespace"`
	Scope         string          `json:"scope"`
	Key           string          `json:"key"`
	Operation     string          `json:"operation,omitempty"`
	State         string          `json:"state"`
	RecoveryPoint string          `json:"recovery_point,omitempty"`
	PhaseState    json.RawMessage `json:"phase_state,omitempty"`
	Owner         string          `json:"owner,omitempty"`
	LeaseLeft     string          `json:"lease_left,omitempty"` // negative once expired
	Attempts      int             `json:"attempts,omitempty"`
	Age           string          `json:"age,omitempty"` // since the claim
	ExpiresIn     string          `json:"expires_in"`    // negative once past retention
	Status        *int            `json:"response_status,omitempty"`
	// Stuck: claimed, no live owner, and past retention. Such a record is
	// never pruned (a committed phase would run again); it waits for a
	// retry, the completer, or an operator's Resolve.
	Stuck bool `json:"stuck,omitempty"`
}

// Inspect returns the record for (namespace, scope, key), or pgx.ErrNoRows.
func (e *Engine) Inspect(ctx context.Context, namespace, scope, key string) (*RecordInfo, error) {
	r, err := e.store.inspect(ctx, recordID(namespace, scope, key))
	if err != nil {
		return nil, err
	}
	r.Namespace, r.Scope, r.Key = namespace, scope, key // what found it
	return r, nil
}

// Abandoned lists up to limit claimed records whose owner's lease has
// expired, oldest lease first: executions that died and that no retry has
// resumed yet. With stuckOnly, only those past their retention.
func (e *Engine) Abandoned(ctx context.Context, stuckOnly bool, limit int) ([]*RecordInfo, error) {
	rs, err := e.store.abandoned(ctx, stuckOnly, limit)
	if err != nil {
		return nil, fmt.Errorf("idem: abandoned: %w", err)
	}
	return rs, nil
}
