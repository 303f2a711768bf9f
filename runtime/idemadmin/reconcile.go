package idemadmin

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtype"
	"github.com/idemgen/idemgen/runtime/internal/adminlink"
)

// NaturalDuplicate is one natural key (x-idempotency natural-key) that
// more than one completed record keeps: one intent in business terms,
// executed under more than one idempotency key. A client that mints a key
// per attempt makes them; so does an asynchronous failover that lost the
// record of a request its client then retried.
type NaturalDuplicate struct {
	// NaturalKey is the digest in hex (NaturalKey computes a suspected
	// value's, to find it).
	NaturalKey string `json:"natural_key"`
	// Executions is how many completed records keep it: 2 or more.
	Executions int `json:"executions"`
	// First and Last are when the first and the last of them completed.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// NaturalKey is the natural key, in hex as Reconcile lists it, of a request
// of operation in namespace (the operationId, or its x-idempotency group)
// by the caller scope (its principal, header or sender, as the key's scope
// is) with the natural-key values, in the order the operation lists them.
func NaturalKey(namespace, scope, operation string, values []string) string {
	return hex.EncodeToString(adminlink.NaturalKey(namespace, scope, idemtype.NaturalKeyDigest(operation, values)))
}

// Reconcile lists the natural keys that more than one record completed
// since since keeps, the latest first, at most limit (100 when 0). Only
// records within their retention are seen, and only those completed by a
// request (the background completer records no natural key). A since in
// the future is an error.
func Reconcile(ctx context.Context, e *idem.Engine, since time.Time, limit int) ([]NaturalDuplicate, error) {
	if since.After(time.Now()) {
		return nil, fmt.Errorf("idemadmin: reconcile since %s: that is in the future; give a time in the past (the last failover's, or now minus the retention)", since.Format(time.RFC3339))
	}
	if limit < 0 {
		return nil, fmt.Errorf("idemadmin: reconcile limit %d: want 0 (100) or more", limit)
	}
	if limit == 0 {
		limit = 100
	}
	ds, err := adminlink.Of(e).Reconcile(ctx, since, limit)
	if err != nil {
		return nil, err
	}
	out := make([]NaturalDuplicate, len(ds))
	for i, d := range ds {
		out[i] = NaturalDuplicate{NaturalKey: d.NaturalKey, Executions: d.Executions, First: d.First, Last: d.Last}
	}
	return out, nil
}
