// Package adminlink joins runtime/idemadmin to the operator calls that
// runtime/idem implements, so that the engine's package exports none of
// them. Its types are idemadmin's, field for field (idemadmin converts
// them and documents them); the compiler keeps the two alike.
package adminlink

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Engine is an engine's operator calls.
type Engine interface {
	Inspect(ctx context.Context, namespace, scope, key string) (*RecordInfo, error)
	Abandoned(ctx context.Context, q AbandonedQuery) ([]*RecordInfo, error)
	NamespacesOf(ctx context.Context, operationID string) ([]string, error)
	Resolve(ctx context.Context, namespace, scope, key string, r Resolution) error
	ResolveID(ctx context.Context, id string, r Resolution) error
	Prune(ctx context.Context, o PruneOptions) (int64, error)
	CompleteAbandoned(ctx context.Context, limit int) (int, error)
	Reconcile(ctx context.Context, since time.Time, limit int) ([]NaturalDuplicate, error)
}

// NaturalDuplicate is idemadmin.NaturalDuplicate.
type NaturalDuplicate struct {
	NaturalKey  string
	Executions  int
	First, Last time.Time
}

// Of returns the operator calls of engine, an *idem.Engine; runtime/idem
// sets it when it is initialised.
var Of func(engine any) Engine

// DeriveKey, ScopeDigest and NaturalKey are idemadmin's; runtime/idem sets
// them.
var (
	DeriveKey   func(v int16, namespace, scope, key, phase string, fingerprint []byte, length int) string
	ScopeDigest func(scope string) string
	NaturalKey  func(namespace, scope string, given []byte) []byte
)

// ErrNotAbandoned is idemadmin.ErrNotAbandoned.
var ErrNotAbandoned = errors.New("idem: the record is not abandoned (completed, or its owner's lease is live)")

// RecordInfo is idemadmin.RecordInfo.
type RecordInfo struct {
	ID            string          `json:"id"`
	Namespace     string          `json:"namespace"`
	Scope         string          `json:"scope"`
	Key           string          `json:"key"`
	Operation     string          `json:"operation,omitempty"`
	State         string          `json:"state"`
	RecoveryPoint string          `json:"recovery_point,omitempty"`
	PhaseState    json.RawMessage `json:"phase_state,omitempty"`
	Owner         string          `json:"owner,omitempty"`
	LeaseLeft     string          `json:"lease_left,omitempty"`
	Attempts      int             `json:"attempts,omitempty"`
	Age           string          `json:"age,omitempty"`
	ExpiresIn     string          `json:"expires_in"`
	Status        *int            `json:"response_status,omitempty"`
	Reference     json.RawMessage `json:"render_reference,omitempty"`
	Stuck         bool            `json:"stuck,omitempty"`
}

// Resolution is idemadmin.Resolution.
type Resolution struct {
	Delete    bool
	Status    int
	Detail    string
	Retention time.Duration
}

// AbandonedQuery is idemadmin.AbandonedQuery.
type AbandonedQuery struct {
	StuckOnly            bool
	Namespace, Operation string
	Limit                int
}

// PruneOptions is idemadmin.PruneOptions.
type PruneOptions struct {
	Batch int
	Rest  float64
}
