package idem

// An operator's calls (runtime/idemadmin): inspect a record, list the
// abandoned ones, and resolve one deliberately. The pruner is in prune.go,
// the background completer in completer.go.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemtype"
	"github.com/idemgen/idemgen/runtime/internal/adminlink"
)

// admin is an engine's operator calls, which runtime/idemadmin makes
// public (through runtime/internal/adminlink, so that this package
// exports none of them).
type admin struct{ e *Engine }

func init() {
	adminlink.Of = func(engine any) adminlink.Engine { return admin{engine.(*Engine)} }
}

func (a admin) Resolve(ctx context.Context, namespace, scope, key string, r adminlink.Resolution) error {
	return a.e.resolve(ctx, recordID(namespace, scope, key), r)
}

func (a admin) ResolveID(ctx context.Context, id string, r adminlink.Resolution) error {
	b, err := hex.DecodeString(strings.ReplaceAll(id, "-", ""))
	if err != nil || len(b) != 16 {
		return fmt.Errorf("idem: resolve: %q is not a record id (a UUID, as 'idemgen abandoned' lists it)", id)
	}
	return a.e.resolve(ctx, [16]byte(b), r)
}

func (a admin) Reconcile(ctx context.Context, since time.Time, limit int) ([]adminlink.NaturalDuplicate, error) {
	if err := a.e.store.detect(ctx); err != nil {
		return nil, fmt.Errorf("idem: reconcile: %w", err)
	}
	q := a.e.store.q()
	rows, err := a.e.pool.Query(ctx, q.Reconcile.sql, q.Reconcile.args(&reconcileParams{Since: since, Limit: limit})...)
	if err != nil {
		return nil, fmt.Errorf("idem: reconcile: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (adminlink.NaturalDuplicate, error) {
		var d adminlink.NaturalDuplicate
		var key []byte
		err := r.Scan(&key, &d.Executions, &d.First, &d.Last)
		d.NaturalKey = hex.EncodeToString(key)
		return d, err
	})
}

func (a admin) Prune(ctx context.Context, o adminlink.PruneOptions) (int64, error) {
	return a.e.prune(ctx, o)
}

func (a admin) CompleteAbandoned(ctx context.Context, limit int) (int, error) {
	return a.e.completeAbandoned(ctx, limit)
}

func (e *Engine) resolve(ctx context.Context, id [16]byte, r adminlink.Resolution) error {
	if err := e.store.detect(ctx); err != nil {
		return fmt.Errorf("idem: resolve: %w", err)
	}
	placement := e.store.placementByID(ctx, id)
	if e.store.placed() && placement == "" {
		_, err := e.store.inspect(ctx, id) // none: pgx.ErrNoRows
		if err == nil {
			err = adminlink.ErrNotAbandoned
		}
		return err
	}
	var done bool
	var err error
	if r.Delete {
		done, err = e.store.resolveDelete(ctx, id, placement)
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
		op, fp, owner, found, rerr := e.store.resolveRead(ctx, id, placement)
		if err = rerr; found {
			e.hooks.run(e.hooks.afterRead)
			done, err = e.store.resolveComplete(ctx, id, placement, owner, receiptFingerprint(op, fp), r.Status, headers, body, r.Retention)
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
	return adminlink.ErrNotAbandoned
}

func (a admin) Inspect(ctx context.Context, namespace, scope, key string) (*adminlink.RecordInfo, error) {
	e := a.e
	if err := e.store.detect(ctx); err != nil {
		return nil, err
	}
	r, err := e.store.inspect(ctx, recordID(namespace, scope, key))
	if err != nil {
		return nil, err
	}
	r.Namespace, r.Scope, r.Key = namespace, scope, key // what found it
	if r.State == "completed" {
		// An answer stored compact (Policy.Render): the reference its
		// replays are rendered from.
		id := recordID(namespace, scope, key)
		if rec, err := e.store.read(ctx, e.pool, id, e.store.placementByID(ctx, id)); err == nil && !rec.bodyOmitted {
			if resp := rec.response(); rendered(resp) {
				r.Reference = json.RawMessage(resp.Body)
			}
		}
	}
	return r, nil
}

func (a admin) Abandoned(ctx context.Context, q adminlink.AbandonedQuery) ([]*adminlink.RecordInfo, error) {
	rs, err := a.e.store.abandoned(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("idem: abandoned: %w", err)
	}
	return rs, nil
}

func (a admin) NamespacesOf(ctx context.Context, operationID string) ([]string, error) {
	return a.e.store.namespacesOf(ctx, operationID)
}
