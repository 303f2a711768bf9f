package idem

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/runtime/idemtype"
	"github.com/idemgen/idemgen/runtime/internal/adminlink"
)

// The store's statements for the pruner (prune.go), the background
// completer (completer.go) and operators (operator.go).

// pruneBounds finds the ends of the next pruneTripBatches batches from
// from on (PruneBounds).
func (s *store) pruneBounds(ctx context.Context, batch int, from time.Time) ([]pruneBound, error) {
	p := &pruneBoundsParams{From: from, Batch: batch, Batches: pruneTripBatches}
	rows, err := s.pool.Query(ctx, s.q().PruneBounds.sql, s.q().PruneBounds.args(p)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (b pruneBound, err error) {
		err = row.Scan(&b.at, &b.tied)
		return b, err
	})
}

// pruneRanges deletes the freeable records of each range [bounds[i],
// bounds[i+1]) (Prune), in a transaction each, sent in one round trip with
// pace's pauses (PruneRest) between them. It returns how many records each
// committed batch deleted: when a batch fails, the batches before it stand,
// its own transaction is rolled back (session.end) and the rest were not
// run.
func (s *store) pruneRanges(ctx context.Context, bounds []pruneBound, pace *prunePace) ([]int64, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer newSession(pc).end()
	var counts []int64
	b := &pgx.Batch{}
	// paused[i]: a pause follows batch i. The rest after the last batch
	// is the trip's (PruneWith), taken without holding the connection.
	paused := make([]bool, len(bounds)-1)
	citus := s.distributed()
	for i := range paused {
		b.Queue(beginSQL)
		if citus {
			// The wait and the asynchronous commit on the workers too.
			b.Queue(citusWait(pruneLockWait, true))
		}
		b.Queue(s.q().Prune.sql, s.q().Prune.args(&pruneParams{From: bounds[i].at, To: bounds[i+1].at, LockTimeout: pruneLockWait})...)
		b.Queue(commit)
		if i+1 == len(paused) {
			break
		}
		if d := pace.pause(); d > 0 {
			// statement_timestamp() is the pause's own start in the
			// extended protocol, which the query exec modes the engine
			// works in use (docs/operations.md): a pipeline sends each
			// statement as a message of its own.
			b.Queue(s.q().PruneRest.sql, s.q().PruneRest.args(&pruneRestParams{Seconds: (d - pruneRestEarly).Seconds()})...)
			paused[i] = true
		}
	}
	res := pc.SendBatch(ctx, b)
	for _, rest := range paused {
		var n int64
		if _, err = res.Exec(); err != nil {
			break
		}
		if citus {
			if _, err = res.Exec(); err != nil {
				break
			}
		}
		if err = res.QueryRow().Scan(&n); err != nil {
			break
		}
		if _, err = res.Exec(); err != nil {
			break
		}
		counts = append(counts, n)
		if rest {
			var slept float64
			if err = res.QueryRow().Scan(&slept); err != nil {
				break
			}
			pace.slept += time.Duration(slept * float64(time.Second))
		}
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	return counts, err
}

// pruneSkipping deletes the oldest batch freeable records from from on
// that no other transaction holds (PruneSkipping).
func (s *store) pruneSkipping(ctx context.Context, batch int, from time.Time) (n int64, next *time.Time, last bool, err error) {
	p := &pruneSkippingParams{From: from, Batch: batch}
	q := s.q()
	if !s.distributed() {
		if err := s.pool.QueryRow(ctx, q.PruneSkipping.sql, q.PruneSkipping.args(p)...).Scan(&n, &next); err != nil {
			return 0, nil, false, err
		}
		return n, next, n < int64(batch), nil
	}
	// On Citus, in a transaction whose waits are bounded on the workers,
	// in one round trip.
	err = s.citusTx(ctx, "prune", pruneLockWait, true, q.PruneSkipping.sql, q.PruneSkipping.args(p), func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(&n, &next)
	})
	if err != nil {
		return 0, nil, false, err
	}
	return n, next, n < int64(batch), nil
}

// namespacesOf lists the namespaces of op's claimed records (NamespacesOf).
func (s *store) namespacesOf(ctx context.Context, op string) ([]string, error) {
	rows, err := s.pool.Query(ctx, s.q().NamespacesOf.sql, s.q().NamespacesOf.args(&operationParams{Operation: op})...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// countStuck counts the records Abandoned(ctx, true, ...) would list
// (CountStuck).
func (s *store) countStuck(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, s.q().CountStuck.sql).Scan(&n)
	return n, err
}

// abandonedRecord is a row of AbandonedBackground: what the completer needs
// to take a record over and run it.
type abandonedRecord struct {
	id                 [16]byte
	ns, scope, key, op string
	owner              [16]byte
	payload, fp        []byte
	placement          string // where the record is placed ("" where nothing is)
}

// abandonedBackground lists up to limit abandoned records of ops with fewer
// than attempts attempts (AbandonedBackground).
func (s *store) abandonedBackground(ctx context.Context, ops []string, attempts, limit int) ([]abandonedRecord, error) {
	p := &abandonedBackgroundParams{Operations: ops, MaxAttempts: attempts, Limit: limit}
	rows, err := s.pool.Query(ctx, s.q().AbandonedBackground.sql, s.q().AbandonedBackground.args(p)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (abandonedRecord, error) {
		var a abandonedRecord
		if s.placementType != "" {
			err := r.Scan(&a.id, &a.ns, &a.scope, &a.key, &a.op, &a.owner, &a.payload, &a.fp, &a.placement)
			return a, err
		}
		err := r.Scan(&a.id, &a.ns, &a.scope, &a.key, &a.op, &a.owner, &a.payload, &a.fp)
		return a, err
	})
}

// scanRecordInfo decodes the row of Inspect and Abandoned.
func scanRecordInfo(row pgx.Row) (*adminlink.RecordInfo, error) {
	var r adminlink.RecordInfo
	var owner *string
	var lease, age *float64
	var expires float64
	err := row.Scan(&r.ID, &r.Namespace, &r.Scope, &r.Key, &r.Operation, &r.State, &r.RecoveryPoint, &r.PhaseState,
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
	if age != nil {
		r.Age = secs(*age)
	}
	r.ExpiresIn = secs(expires)
	return &r, nil
}

// inspect reads the record with id for an operator (Inspect), or
// pgx.ErrNoRows.
func (s *store) inspect(ctx context.Context, id [16]byte) (*adminlink.RecordInfo, error) {
	return scanRecordInfo(s.pool.QueryRow(ctx, s.q().Inspect.sql, s.q().Inspect.args(&idParams{ID: uuidArg(id)})...))
}

// abandoned lists abandoned records for an operator (Abandoned).
func (s *store) abandoned(ctx context.Context, q adminlink.AbandonedQuery) ([]*adminlink.RecordInfo, error) {
	p := &abandonedParams{StuckOnly: q.StuckOnly, Namespace: q.Namespace, Operation: q.Operation, Limit: q.Limit}
	rows, err := s.pool.Query(ctx, s.q().Abandoned.sql, s.q().Abandoned.args(p)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*adminlink.RecordInfo, error) { return scanRecordInfo(r) })
}

// resolveDelete deletes the abandoned record with id (ResolveDelete), and
// reports whether it did.
func (s *store) resolveDelete(ctx context.Context, id [16]byte, placement string) (bool, error) {
	tag, err := s.pool.Exec(ctx, s.q().ResolveDelete.sql, s.q().ResolveDelete.args(&idParams{ID: uuidArg(id), Placement: placement})...)
	return tag.RowsAffected() == 1, err
}

// resolveRead reads what resolveComplete needs of the abandoned record
// with id (ResolveRead): its operation, fingerprint and owner; found is
// false when no abandoned record has the id.
func (s *store) resolveRead(ctx context.Context, id [16]byte, placement string) (op string, fp []byte, owner pgtype.UUID, found bool, err error) {
	q := s.q()
	err = s.pool.QueryRow(ctx, q.ResolveRead.sql, q.ResolveRead.args(&idParams{ID: uuidArg(id), Placement: placement})...).Scan(&op, &fp, &owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, owner, false, nil
	}
	return op, fp, owner, err == nil, err
}

// resolveComplete completes the abandoned record with id with a problem
// response (ResolveComplete), if owner still holds it and its lease is
// still expired, and reports whether it did. receipt is the receipt's
// fingerprint, made from what resolveRead read.
func (s *store) resolveComplete(ctx context.Context, id [16]byte, placement string, owner pgtype.UUID, receipt []byte, status int, headers, body []byte, retention time.Duration) (bool, error) {
	q := s.q()
	p := &resolveCompleteParams{ID: uuidArg(id), Placement: placement, OwnerToken: owner, Fingerprint: receipt, Status: status,
		Headers: headers, Body: body, RetentionUS: micros(retention), DefaultRetentionUS: micros(idemtype.DefaultRetention)}
	tag, err := s.pool.Exec(ctx, q.ResolveComplete.sql, q.ResolveComplete.args(p)...)
	return tag.RowsAffected() == 1, err
}

// placementByID is the placement of the record of id, for an operator who
// names a record by its key alone: "" where the records table has no
// placement column or no record has the id (a read across placements).
func (s *store) placementByID(ctx context.Context, id [16]byte) string {
	if !s.placed() {
		return ""
	}
	var p string
	if err := s.pool.QueryRow(ctx, "SELECT placement::text FROM "+s.schema+".records WHERE id = $1", uuidArg(id)).Scan(&p); err != nil {
		return ""
	}
	return p
}
