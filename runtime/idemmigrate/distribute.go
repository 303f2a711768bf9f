package idemmigrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
// Distribute), or by placement, co-located with o.ColocateWith. An empty
// records table is laid out at once. One that holds records (a running
// deployment, laid out by id) is moved in two steps, since a completed
// record keeps no key to place it by (migration 005): PreparePlacement
// adds the placement column, which every engine restarted after it
// writes; once no record is left without one, DistributeBy puts the
// column in the primary key, (placement, id), and redistributes the table
// by it (docs/scaling.md, "Moving a running deployment"). Like Distribute
// it runs on the coordinator, after Up, and is idempotent: a table already
// laid out is left as it is (a different layout asked of it is an error),
// and the result reports whether this call changed it. Every service on
// the schema must be restarted after it.
func (m *Migrator) DistributeBy(ctx context.Context, o DistributeOptions) (bool, error) {
	if m.err != nil {
		return false, m.err
	}
	if o.ColocateWith == "" && o.PlacementType == "" {
		return m.Distribute(ctx)
	}
	st, err := m.placementState(ctx, o)
	if err != nil {
		return false, err
	}
	records := m.schema + ".records"
	switch {
	case st.have != "" && st.have != st.typ:
		return false, fmt.Errorf("idem: %s's placement column is %s, not %s: undistribute it and lay it out again", records, st.have, st.typ)
	case st.have == "" && !st.empty:
		return false, fmt.Errorf("idem: %s holds records laid out by id: move them in two steps (docs/scaling.md, \"Moving a running deployment\"): PreparePlacement (idemgen migrate place), restart every service, then DistributeBy again once every record has a placement", records)
	case st.keyed && o.ColocateWith == "":
		return false, nil
	case st.distBy == PlacementColumn && !st.colocated:
		return false, fmt.Errorf("idem: %s is distributed by placement but not co-located with %s: undistribute it and lay it out again", records, o.ColocateWith)
	case st.distBy == PlacementColumn:
		return false, nil
	}
	if !st.keyed {
		if err := m.keyByPlacement(ctx, st); err != nil {
			return false, err
		}
	}
	if o.ColocateWith == "" {
		return true, nil
	}
	if st.dist {
		// A table distributed by id, its records placed (a move, or one
		// cut short after its key was made): Citus redistributes it,
		// holding writes meanwhile.
		_, err = m.pool.Exec(ctx, `SELECT alter_distributed_table($1, distribution_column => $2, colocate_with => $3)`, records, PlacementColumn, o.ColocateWith)
	} else {
		_, err = m.pool.Exec(ctx, `SELECT create_distributed_table($1, $2, colocate_with => $3)`, records, PlacementColumn, o.ColocateWith)
	}
	if err != nil {
		return false, fmt.Errorf("idem: distributing %s by placement with %s: %w", records, o.ColocateWith, err)
	}
	return true, nil
}

// PreparePlacement is the first step of moving a records table that holds
// records to the placement layout o names (DistributeBy): it adds the
// placement column, empty, to the table as it is laid out. An engine that
// finds the column, but not in the table's primary key, writes each new
// record's placement and goes on finding records by id, on every layout;
// one started before it writes none, so every service must be restarted
// after it. The result reports whether this call added the column.
func (m *Migrator) PreparePlacement(ctx context.Context, o DistributeOptions) (bool, error) {
	if m.err != nil {
		return false, m.err
	}
	if o.ColocateWith == "" && o.PlacementType == "" {
		return false, errors.New("idem: PreparePlacement: say the placement's table (ColocateWith) or type (PlacementType)")
	}
	st, err := m.placementState(ctx, o)
	switch {
	case err != nil:
		return false, err
	case st.have != "" && st.have != st.typ:
		return false, fmt.Errorf("idem: %s.records' placement column is %s, not %s", m.schema, st.have, st.typ)
	case st.have != "":
		return false, nil
	}
	if _, err := m.pool.Exec(ctx, `ALTER TABLE `+m.schema+`.records ADD COLUMN `+PlacementColumn+` `+st.typ); err != nil {
		return false, fmt.Errorf("idem: adding %s.records' placement column: %w", m.schema, err)
	}
	return true, nil
}

// placementState is what DistributeBy and PreparePlacement decide on.
type placementState struct {
	typ   string // the placement's type, as o says
	have  string // the placement column's type, "" where there is none
	keyed bool   // the placement column is in the primary key
	dist  bool   // the table is a Citus table
	// distBy is the column it is distributed by ("" for none), and
	// colocated whether it is co-located with o.ColocateWith.
	distBy    string
	colocated bool
	empty     bool // the table holds no record
}

func (m *Migrator) placementState(ctx context.Context, o DistributeOptions) (placementState, error) {
	records := m.schema + ".records"
	st := placementState{typ: o.PlacementType}
	err := m.pool.QueryRow(ctx, `SELECT format_type(a.atttypid, a.atttypmod), EXISTS (SELECT FROM pg_catalog.pg_index i
			WHERE i.indrelid = a.attrelid AND i.indisprimary AND a.attnum = ANY (i.indkey))
		FROM pg_catalog.pg_attribute AS a
		WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND NOT a.attisdropped`, records, PlacementColumn).Scan(&st.have, &st.keyed)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return st, err
	}
	if err = m.pool.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM `+records+`)`).Scan(&st.empty); err != nil {
		return st, err
	}
	if st.dist, err = m.Distributed(ctx); err != nil {
		return st, err
	}
	if st.dist && o.ColocateWith != "" {
		// What a switch cut short leaves (the key made, the table still
		// distributed by id) is told from a finished one by these.
		err := m.pool.QueryRow(ctx, `SELECT coalesce(column_to_column_name(r.logicalrelid, r.partkey), ''),
				coalesce(r.colocationid = (SELECT colocationid FROM pg_catalog.pg_dist_partition WHERE logicalrelid = to_regclass($2)), false)
			FROM pg_catalog.pg_dist_partition r WHERE r.logicalrelid = to_regclass($1)`, records, o.ColocateWith).Scan(&st.distBy, &st.colocated)
		if err != nil {
			return st, err
		}
	}
	if o.ColocateWith == "" && st.typ != "text" && st.typ != "bigint" && st.typ != "uuid" {
		return st, fmt.Errorf("idem: PlacementType %q: want text, bigint or uuid", st.typ)
	}
	if o.ColocateWith != "" {
		if err := m.requireCitus(ctx); err != nil {
			return st, err
		}
		err := m.pool.QueryRow(ctx, `SELECT format_type(a.atttypid, a.atttypmod)
			FROM pg_catalog.pg_dist_partition p JOIN pg_catalog.pg_attribute a
				ON a.attrelid = p.logicalrelid AND a.attname = column_to_column_name(p.logicalrelid, p.partkey)
			WHERE p.logicalrelid = to_regclass($1) AND p.partmethod = 'h'`, o.ColocateWith).Scan(&st.typ)
		if errors.Is(err, pgx.ErrNoRows) {
			return st, fmt.Errorf("idem: %s is not a hash-distributed table: distribute the service's table first (create_distributed_table), then co-locate the records with it", o.ColocateWith)
		}
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// keyByPlacement makes the placement column, of a table laid out by id or
// of an empty one, the primary key's first: (placement, id). A table with
// a record that has no placement (made before PreparePlacement, or by an
// engine not restarted since) is refused, with when the last of them
// expires.
func (m *Migrator) keyByPlacement(ctx context.Context, st placementState) error {
	records := m.schema + ".records"
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	stmts := []string{
		`ALTER TABLE ` + records + ` ALTER COLUMN ` + PlacementColumn + ` SET NOT NULL`,
		`ALTER TABLE ` + records + ` DROP CONSTRAINT records_pkey`,
		`ALTER TABLE ` + records + ` ADD CONSTRAINT records_pkey PRIMARY KEY (` + PlacementColumn + `, id)`,
	}
	if st.have == "" {
		stmts[0] = `ALTER TABLE ` + records + ` ADD COLUMN ` + PlacementColumn + ` ` + st.typ + ` NOT NULL`
	} else {
		var n int64
		var last *time.Time
		var held int64
		err := tx.QueryRow(ctx, `SELECT count(*), max(expires_at), count(*) FILTER (WHERE recovery_point <> '' AND owner_token IS NOT NULL)
			FROM `+records+` WHERE `+PlacementColumn+` IS NULL`).Scan(&n, &last, &held)
		if err != nil {
			return err
		}
		if n > 0 {
			when := "has no retention"
			if last != nil {
				when = "expires at " + last.UTC().Format(time.RFC3339)
			}
			return fmt.Errorf("%w: %d records of %s have none (%d of them executions under way with a recovery point); the last %s: restart every service if not done, prune expired records (idemgen prune) or delete abandoned ones (idemgen resolve -delete), and run this again then",
				ErrUnplaced, n, records, held, when)
		}
	}
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23502" {
				// An engine not restarted since PreparePlacement wrote a
				// record without one after the count above.
				return fmt.Errorf("%w: a record was written without one while the table was checked (an engine not restarted since PreparePlacement): restart every service and run this again", ErrUnplaced)
			}
			return fmt.Errorf("idem: laying %s out by placement: %w", records, err)
		}
	}
	return tx.Commit(ctx)
}

// ErrUnplaced is DistributeBy's error, during a move to the placement
// layout, while records made before it have no placement.
var ErrUnplaced = errors.New("idem: records without a placement remain")

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
