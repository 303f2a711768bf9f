// Package idemadmin is an operator's calls on an engine's records: Inspect
// one, list the Abandoned ones, Resolve one deliberately, Prune the expired,
// and CompleteAbandoned once. The idemgen command's inspect, abandoned,
// resolve and prune run them; a service calls them on its own engine
// (docs/operations.md says when to use which).
package idemadmin

import (
	"context"
	"encoding/json"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/internal/adminlink"
)

// ErrNotAbandoned is returned by Resolve for a record that is completed, or
// claimed by an owner whose lease is live.
var ErrNotAbandoned = adminlink.ErrNotAbandoned

// RecordInfo is what an operator sees of one record. A completed record
// keeps only what a replay needs (migration 005): its operation, recovery
// point, phase state, attempts and age are empty.
type RecordInfo struct {
	// ID is the record's id, by which ResolveID settles it: a record
	// claimed with key derivation 3 keeps its scope's digest, not the
	// scope, so an operator who does not know the scope still can.
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	// Scope is the scope that found the record (Inspect), or what the
	// record keeps (Abandoned): the scope's digest (ScopeDigest) for a
	// record claimed with key derivation 3, the scope itself before.
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
	// Reference is what a completed record of an operation that renders
	// its replays (idem.Policy.Render) keeps of its answer: the values at the
	// render pointers, from which every replay is rendered (Inspect only).
	Reference json.RawMessage `json:"render_reference,omitempty"`
	// Stuck: claimed, no live owner, and past retention. Such a record is
	// never pruned (a committed phase would run again); it waits for a
	// retry, the completer, or an operator's Resolve.
	Stuck bool `json:"stuck,omitempty"`
}

// Inspect returns the record for (namespace, scope, key), or pgx.ErrNoRows.
func Inspect(ctx context.Context, e *idem.Engine, namespace, scope, key string) (*RecordInfo, error) {
	r, err := adminlink.Of(e).Inspect(ctx, namespace, scope, key)
	if err != nil {
		return nil, err
	}
	return (*RecordInfo)(r), nil
}

// AbandonedQuery says which abandoned records Abandoned lists.
type AbandonedQuery struct {
	StuckOnly bool // only those past their retention
	// Namespace, when set, keeps the records of that namespace (a group, or
	// an operationId outside any group), and those of operationId
	// Operation in any namespace ("" for none).
	Namespace, Operation string
	Limit                int // at most this many, oldest lease first
}

// Abandoned lists the claimed records q keeps whose owner's lease has
// expired, oldest lease first: executions that died and that no retry has
// resumed yet. The limit counts only the records q keeps.
func Abandoned(ctx context.Context, e *idem.Engine, q AbandonedQuery) ([]*RecordInfo, error) {
	rs, err := adminlink.Of(e).Abandoned(ctx, adminlink.AbandonedQuery(q))
	if err != nil {
		return nil, err
	}
	out := make([]*RecordInfo, len(rs))
	for i, r := range rs {
		out[i] = (*RecordInfo)(r)
	}
	return out, nil
}

// NamespacesOf returns the namespaces (groups) under which claimed records
// of the operation operationID are kept, at most three: what an operator
// who names a grouped operation by its operationId meant. Completed records
// keep no operation, so it finds nothing for an operation whose records are
// all complete; the spec says which group an operation is in.
func NamespacesOf(ctx context.Context, e *idem.Engine, operationID string) ([]string, error) {
	return adminlink.Of(e).NamespacesOf(ctx, operationID)
}

// Resolution is an operator's decision about an abandoned record.
type Resolution struct {
	// Delete frees the key. Whatever the record's committed phases did
	// stays done, and a retry with the key executes from the start: choose
	// it only when those effects were undone or never happened.
	Delete bool
	// Otherwise the record is completed with a problem response: Status
	// (400 to 599, default 500) and Detail, replayed to every retry for
	// Retention from now; by default for the operation's own retention (as
	// long as the record was claimed for, and at least
	// idemtype.DefaultRetention), so that no retry within it executes the
	// key again.
	Status    int
	Detail    string
	Retention time.Duration
}

// Resolve settles one abandoned record deliberately (see Resolution). It
// refuses a record that is completed or has a live owner
// (ErrNotAbandoned), and returns pgx.ErrNoRows when there is no record.
func Resolve(ctx context.Context, e *idem.Engine, namespace, scope, key string, r Resolution) error {
	return adminlink.Of(e).Resolve(ctx, namespace, scope, key, adminlink.Resolution(r))
}

// ResolveID is Resolve for the record of id (RecordInfo.ID, as Abandoned
// lists it): for an operator who has the record but not its scope.
func ResolveID(ctx context.Context, e *idem.Engine, id string, r Resolution) error {
	return adminlink.Of(e).ResolveID(ctx, id, adminlink.Resolution(r))
}

// PruneOptions tune Prune. The zero PruneOptions prunes at full pace, in
// batches of 1000.
type PruneOptions struct {
	// Batch is the most records one transaction deletes (default 1000).
	// Beside live claims, smaller batches (100) keep each commit's flush
	// short: a claim's commit writes out whatever WAL a batch wrote ahead
	// of it.
	Batch int
	// Rest is how long the pruner pauses after each batch, as a multiple
	// of the time the batch took: with 1 it runs at most half of the time
	// and leaves the database's WAL and CPU to claims in between. The
	// pauses between the batches of a round trip are taken in the server
	// (pg_sleep, in whole milliseconds, which holds the trip's connection
	// for them), so that the database's work comes in bursts of a batch or
	// two, not of a whole round trip; what is left is taken after the trip.
	// 0 prunes at full pace; at most 1,000.
	Rest float64
}

// PruneBesideClaims is the pace measured beside live claims
// (docs/scaling.md, "The prune and the claims"): batches of 100, resting
// as long as each batch took. idemgen prune and the payments example
// prune at it.
var PruneBesideClaims = PruneOptions{Batch: 100, Rest: 1}

// Prune deletes records past their retention, oldest first, in batches,
// until none remain or ctx ends. It returns how many it deleted. A record
// it skipped (locked, or not yet freeable) is left for the next prune.
//
// A batch is one range of expires_at, deleted by one scan of its index.
// One statement finds the ranges of the next ten batches, and one round
// trip deletes them, each in a transaction of its own. Where a row of a
// range is held by another transaction (another pruner's batch, a claim
// of the same key), the batch waits briefly for it, then locks its rows
// with SKIP LOCKED instead, so many processes can prune at once, and a
// claim of the same key waits for at most one batch's transaction. A
// claimed record is deleted only once its lease has also expired and only
// if no phase of it committed: a running execution is never pruned under
// its owner, and a half-done one waits for its owner, a retry, the
// completer or an operator (see Abandoned), whatever its age. After the
// last batch, Prune reports how many such records are stuck past their
// retention (idem.EventStuck), and each batch's count (idem.EventPruned),
// to the engine's observer.
func Prune(ctx context.Context, e *idem.Engine, o PruneOptions) (int64, error) {
	return adminlink.Of(e).Prune(ctx, adminlink.PruneOptions(o))
}

// CompleteAbandoned finds up to limit records of the engine's registered
// operations (idem.RegisterCompleter) whose owner's lease expired, takes
// each over with a new owner token (the same fencing as a retry's
// takeover), and runs its remaining phases from the stored request. It
// returns how many it completed. Records another process is already
// completing are skipped. idem.Engine.RunCompleter calls it on a ticker.
func CompleteAbandoned(ctx context.Context, e *idem.Engine, limit int) (int, error) {
	return adminlink.Of(e).CompleteAbandoned(ctx, limit)
}

// KeyDerivation versions how derived keys are computed. Each record keeps
// the version it was claimed with, so an execution in flight across an
// upgrade presents the foreign system the same key on every attempt.
type KeyDerivation int16

const (
	// KeyDerivationV1 hashes (namespace, scope, key, phase). Records claimed
	// before migration 002 use it.
	KeyDerivationV1 KeyDerivation = 1
	// KeyDerivationV2 also hashes the request fingerprint: a key released
	// and reused with another request derives other foreign keys, so a
	// foreign system never sees one key with two sets of parameters.
	KeyDerivationV2 KeyDerivation = 2
	// KeyDerivationV3 hashes the scope's digest (ScopeDigest) where V2
	// hashes the scope: the records table keeps only the digest (a scope
	// is often a credential), and the background completer, which has
	// only what the table keeps, derives the same keys from it.
	KeyDerivationV3 KeyDerivation = 3
)

// CurrentKeyDerivation is the version new claims use.
const CurrentKeyDerivation = KeyDerivationV3

// DeriveKey returns the idempotency key the engine sends a foreign system
// for a call made by phase within the execution of (namespace, scope, key)
// for the request whose fingerprint is given (ignored by KeyDerivationV1):
// what an operator looks up on the foreign side. It is deterministic, so
// every retry and resumption sends the foreign system the same key; it is
// ASCII (idem.DerivedKeyPrefix, then lowercase hex) and length characters
// long, clamped to [20, 64]. Distinct inputs collide with probability
// 2^-(4*(length-4)).
func DeriveKey(v KeyDerivation, namespace, scope, key, phase string, fingerprint []byte, length int) string {
	return adminlink.DeriveKey(int16(v), namespace, scope, key, phase, fingerprint, length)
}

// ScopeDigest is the SHA-256 of a scope, in hex: what the records table
// keeps of a claim's scope (RecordInfo.Scope, for records claimed with
// KeyDerivationV3), and what identifies a scope in the engine's logs
// without showing it.
func ScopeDigest(scope string) string { return adminlink.ScopeDigest(scope) }
