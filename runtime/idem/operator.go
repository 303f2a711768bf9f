package idem

// An operator's calls: Inspect a record, list the Abandoned ones, and
// Resolve one deliberately (idemgen inspect, abandoned and resolve run
// them; docs/operations.md says when to use which). The pruner is in
// prune.go, the background completer in completer.go.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

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

// ErrNotAbandoned is returned by Resolve for a record that is completed, or
// claimed by an owner whose lease is live.
var ErrNotAbandoned = errors.New("idem: the record is not abandoned (completed, or its owner's lease is live)")

// Resolve settles one abandoned record deliberately (see Resolution). It
// refuses a record that is completed or has a live owner, and returns
// pgx.ErrNoRows when there is no record.
func (e *Engine) Resolve(ctx context.Context, namespace, scope, key string, r Resolution) error {
	return e.resolve(ctx, recordID(namespace, scope, key), r)
}

// ResolveID is Resolve for the record of id (RecordInfo.ID, as Abandoned
// lists it): for an operator who has the record but not its scope.
func (e *Engine) ResolveID(ctx context.Context, id string, r Resolution) error {
	b, err := hex.DecodeString(strings.ReplaceAll(id, "-", ""))
	if err != nil || len(b) != 16 {
		return fmt.Errorf("idem: resolve: %q is not a record id (a UUID, as 'idemgen abandoned' lists it)", id)
	}
	return e.resolve(ctx, [16]byte(b), r)
}

func (e *Engine) resolve(ctx context.Context, id [16]byte, r Resolution) error {
	var done bool
	var err error
	if r.Delete {
		done, err = e.store.resolveDelete(ctx, id)
	} else {
		if r.Status == 0 {
			r.Status = http.StatusInternalServerError
		}
		if r.Status < 400 || r.Status > 599 {
			return fmt.Errorf("idem: resolve: status %d is not a 4xx or 5xx", r.Status)
		}
		if r.Retention < 0 {
			return fmt.Errorf("idem: resolve: retention %v is negative", r.Retention)
		}
		body, merr := json.Marshal(idemtype.Problem{Type: idemtype.ProblemTypeBase + "resolved-by-operator",
			Title: "An operator settled this request", Status: r.Status, Detail: r.Detail})
		if merr != nil {
			return merr
		}
		headers := appendHeaders(nil, http.Header{"Content-Type": {idemtype.ProblemContentType}})
		op, fp, owner, found, rerr := e.store.resolveRead(ctx, id)
		if err = rerr; found {
			e.hooks.run(e.hooks.afterRead)
			done, err = e.store.resolveComplete(ctx, id, owner, receiptFingerprint(op, fp), r.Status, headers, body, r.Retention)
		}
	}
	if err != nil {
		return fmt.Errorf("idem: resolve: %w", err)
	}
	if done {
		return nil
	}
	if _, err := e.store.inspect(ctx, id); err != nil {
		return err
	}
	return ErrNotAbandoned
}

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
	// its replays (Policy.Render) keeps of its answer: the values at the
	// render pointers, from which every replay is rendered (Inspect only).
	Reference json.RawMessage `json:"render_reference,omitempty"`
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
	if r.State == "completed" {
		// An answer stored compact (Policy.Render): the reference its
		// replays are rendered from.
		if rec, err := e.store.read(ctx, e.pool, recordID(namespace, scope, key)); err == nil && !rec.bodyOmitted {
			if resp := rec.response(); rendered(resp) {
				r.Reference = json.RawMessage(resp.Body)
			}
		}
	}
	return r, nil
}

// Abandoned lists up to limit claimed records whose owner's lease has
// expired, oldest lease first: executions that died and that no retry has
// resumed yet. With stuckOnly, only those past their retention.
func (e *Engine) Abandoned(ctx context.Context, stuckOnly bool, limit int) ([]*RecordInfo, error) {
	return e.AbandonedOf(ctx, AbandonedQuery{StuckOnly: stuckOnly, Limit: limit})
}

// AbandonedQuery says which abandoned records AbandonedOf lists.
type AbandonedQuery struct {
	StuckOnly bool // only those past their retention
	// Namespace, when set, keeps the records of that namespace (a group, or
	// an operationId outside any group), and those of operationId
	// Operation in any namespace ("" for none).
	Namespace, Operation string
	Limit                int // at most this many, oldest lease first
}

// AbandonedOf is Abandoned narrowed by q, in the query: the limit counts
// only the records q keeps.
func (e *Engine) AbandonedOf(ctx context.Context, q AbandonedQuery) ([]*RecordInfo, error) {
	rs, err := e.store.abandoned(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("idem: abandoned: %w", err)
	}
	return rs, nil
}

// NamespacesOf returns the namespaces (groups) under which claimed records
// of the operation operationID are kept, at most three: what an operator
// who names a grouped operation by its operationId meant. Completed records
// keep no operation, so it finds nothing for an operation whose records are
// all complete; the spec says which group an operation is in.
func (e *Engine) NamespacesOf(ctx context.Context, operationID string) ([]string, error) {
	return e.store.namespacesOf(ctx, operationID)
}
