package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
	id := recordID(namespace, scope, key)
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
		done, err = e.store.resolveComplete(ctx, id, r.Status, headers, body, r.Retention)
	}
	if err != nil {
		return fmt.Errorf("idem: resolve: %w", err)
	}
	if done {
		return nil
	}
	if _, err := e.Inspect(ctx, namespace, scope, key); err != nil {
		return err
	}
	return ErrNotAbandoned
}
