package idemmigrate

import (
	"context"
	"errors"
	"fmt"
)

// Citus (distributed PostgreSQL) keeps a distributed table's rows in shards
// on its worker nodes. The records table is distributed by its id, the
// digest of (namespace, scope, key) every statement of the engine names:
// each statement then reaches exactly one shard, keys spread evenly over
// the workers, and nothing in the record changes. docs/scaling.md says why
// this distribution and not one co-located with a tenant's tables, and
// what it costs.

// DistributionColumn is the column the records table is distributed by.
const DistributionColumn = "id"

// Distributed reports whether the schema's records table is a Citus
// distributed table. On a server without Citus it is false.
func (m *Migrator) Distributed(ctx context.Context) (bool, error) {
	if m.err != nil {
		return false, m.err
	}
	// Two statements: one that named Citus' catalog where it is missing
	// would fail to plan.
	var ok bool
	err := m.pool.QueryRow(ctx, `SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL`).Scan(&ok)
	if err != nil || !ok {
		return false, err
	}
	err = m.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = to_regclass($1))`, m.schema+".records").Scan(&ok)
	return ok, err
}

// ErrNoCitus is Distribute's error on a server without the Citus extension
// in the database.
var ErrNoCitus = errors.New("idem: the Citus extension is not installed in this database (CREATE EXTENSION citus, on the coordinator and every worker)")

// Distribute makes the schema's records table a Citus distributed table,
// sharded by its id and co-located with nothing. It runs on the
// coordinator, after Up, and is idempotent: a table already distributed
// is left as it is, and the result reports whether this call distributed
// it. The table's records are moved into the shards (Citus locks the table
// against writes meanwhile: distribute before the service takes traffic).
// Every service on the schema must be restarted after it: an engine picks
// its statements once, when it first reaches the store. Undistribute
// reverses it.
func (m *Migrator) Distribute(ctx context.Context) (bool, error) {
	if m.err != nil {
		return false, m.err
	}
	if err := m.requireCitus(ctx); err != nil {
		return false, err
	}
	if done, err := m.Distributed(ctx); err != nil || done {
		return false, err
	}
	_, err := m.pool.Exec(ctx, `SELECT create_distributed_table($1, $2, colocate_with => 'none')`, m.schema+".records", DistributionColumn)
	if err != nil {
		return false, fmt.Errorf("idem: distributing %s.records: %w", m.schema, err)
	}
	return true, nil
}

// Undistribute makes a distributed records table an ordinary table on the
// coordinator again, with every record (Citus' undistribute_table). It is
// idempotent: a table that is not distributed is left as it is, and the
// result reports whether this call undistributed it.
func (m *Migrator) Undistribute(ctx context.Context) (bool, error) {
	if m.err != nil {
		return false, m.err
	}
	if done, err := m.Distributed(ctx); err != nil || !done {
		return false, err
	}
	if _, err := m.pool.Exec(ctx, `SELECT undistribute_table($1)`, m.schema+".records"); err != nil {
		return false, fmt.Errorf("idem: undistributing %s.records: %w", m.schema, err)
	}
	return true, nil
}

func (m *Migrator) requireCitus(ctx context.Context) error {
	var ok bool
	if err := m.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')`).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return ErrNoCitus
	}
	return nil
}
