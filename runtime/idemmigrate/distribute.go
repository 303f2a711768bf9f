package idemmigrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Citus (distributed PostgreSQL) keeps a distributed table's rows in shards
// on its worker nodes. There are two layouts of the records table
// (docs/scaling.md, "Citus", says which to choose):
//
//   - by id (Distribute), the digest of (namespace, scope, key) every
//     statement of the engine names: each statement reaches exactly one
//     shard, keys spread evenly over the workers, and nothing in the
//     record changes; but a request's record and its business rows are on
//     different workers, and its commits are two-phase;
//   - by placement (DistributeBy with ColocateWith), a value of the
//     request its operation declares (a tenant's or an account's id): the
//     records table gains a placement column of the type the service's
//     table is distributed by, its primary key becomes (placement, id),
//     and it is co-located with that table, so that a request's record and
//     the tenant's rows are on one worker and its transactions commit
//     there.

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

// DistributeOptions say how DistributeBy lays the records table out.
type DistributeOptions struct {
	// ColocateWith names a distributed table of the service (schema-
	// qualified where it is not on the search path): the records table is
	// distributed by a placement column of the type that table is
	// distributed by, and co-located with it. "" distributes by id
	// (Distribute).
	ColocateWith string
	// PlacementType, on a server without Citus, adds the placement column
	// (of this type: text, bigint or uuid) and the (placement, id) primary
	// key without distributing anything: the placement layout on one
	// PostgreSQL, which runs the engine's placement statements as Citus
	// would route them, for tests. Ignored with ColocateWith.
	PlacementType string
}

// PlacementColumn is the column the placement layout distributes the
// records table by.
const PlacementColumn = "placement"

// DistributeBy lays the records table out as o says: by id (o zero, as
// Distribute), or by placement, co-located with o.ColocateWith. The
// placement layout needs an empty records table: a completed record keeps
// no key to place it by (migration 005). Like Distribute it runs on the
// coordinator, after Up, and is idempotent: a table already laid out is
// left as it is (a different layout asked of it is an error), and the
// result reports whether this call changed it. Every service on the
// schema must be restarted after it.
func (m *Migrator) DistributeBy(ctx context.Context, o DistributeOptions) (bool, error) {
	if m.err != nil {
		return false, m.err
	}
	if o.ColocateWith == "" && o.PlacementType == "" {
		return m.Distribute(ctx)
	}
	records := m.schema + ".records"
	var have string
	err := m.pool.QueryRow(ctx, `SELECT coalesce((SELECT format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute
		WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped), '')`, records, PlacementColumn).Scan(&have)
	if err != nil {
		return false, err
	}
	dist, err := m.Distributed(ctx)
	if err != nil {
		return false, err
	}
	typ := o.PlacementType
	if o.ColocateWith == "" && typ != "text" && typ != "bigint" && typ != "uuid" {
		return false, fmt.Errorf("idem: PlacementType %q: want text, bigint or uuid", typ)
	}
	if o.ColocateWith != "" {
		if err := m.requireCitus(ctx); err != nil {
			return false, err
		}
		err := m.pool.QueryRow(ctx, `SELECT format_type(a.atttypid, a.atttypmod)
			FROM pg_catalog.pg_dist_partition p JOIN pg_catalog.pg_attribute a
				ON a.attrelid = p.logicalrelid AND a.attname = column_to_column_name(p.logicalrelid, p.partkey)
			WHERE p.logicalrelid = to_regclass($1) AND p.partmethod = 'h'`, o.ColocateWith).Scan(&typ)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, fmt.Errorf("idem: %s is not a hash-distributed table: distribute the service's table first (create_distributed_table), then co-locate the records with it", o.ColocateWith)
		}
		if err != nil {
			return false, err
		}
	}
	switch {
	case have != "" && have != typ:
		return false, fmt.Errorf("idem: %s's placement column is %s, not %s: undistribute it and lay it out again", records, have, typ)
	case have == "" && dist:
		return false, fmt.Errorf("idem: %s is distributed by id: move its records to a placement layout as docs/scaling.md says (a placement needs an empty table)", records)
	case have != "" && (dist || o.ColocateWith == ""):
		return false, nil
	}
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	if have == "" {
		var empty bool
		if err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM `+records+`)`).Scan(&empty); err != nil {
			return false, err
		}
		if !empty {
			return false, fmt.Errorf("idem: %s holds records: a placement layout needs an empty table (a completed record keeps no key to place it by); move a running deployment as docs/scaling.md says", records)
		}
		for _, stmt := range []string{
			`ALTER TABLE ` + records + ` ADD COLUMN ` + PlacementColumn + ` ` + typ + ` NOT NULL`,
			`ALTER TABLE ` + records + ` DROP CONSTRAINT records_pkey`,
			`ALTER TABLE ` + records + ` ADD CONSTRAINT records_pkey PRIMARY KEY (` + PlacementColumn + `, id)`,
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return false, fmt.Errorf("idem: laying %s out by placement: %w", records, err)
			}
		}
	}
	if o.ColocateWith != "" {
		if _, err := tx.Exec(ctx, `SELECT create_distributed_table($1, $2, colocate_with => $3)`, records, PlacementColumn, o.ColocateWith); err != nil {
			return false, fmt.Errorf("idem: distributing %s by placement with %s: %w", records, o.ColocateWith, err)
		}
	}
	return true, tx.Commit(ctx)
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
