// Package idemmigrate creates and upgrades the tables of idemgen's engine
// (runtime/idem) in a PostgreSQL schema: one Migrator per schema, after
// river's rivermigrate. A service calls Up at startup; the idemgen migrate
// command and the SQL of Migrations serve those who apply migrations with
// their own tool (goose, tern, golang-migrate). docs/operations.md says how
// each migration runs beside live services.
package idemmigrate

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// DefaultSchema is the schema the engine's tables live in unless configured.
const DefaultSchema = "idemgen"

// Migration is one numbered schema change, with its SQL for a given schema.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// CheckSchema refuses a schema name the engine cannot use unquoted in its
// SQL.
func CheckSchema(schema string) error {
	if !schemaName.MatchString(schema) {
		return fmt.Errorf("idem: schema name %q must match %s", schema, schemaName)
	}
	return nil
}

// Migrator applies and reverts the migrations of one schema:
//
//	if _, err := idemmigrate.New(pool, idem.DefaultSchema).Up(ctx); err != nil {
//		return err
//	}
type Migrator struct {
	pool   *pgxpool.Pool
	schema string
	all    []Migration
	q      queries
	err    error // a schema the engine cannot use, returned by every method
}

// New returns the migrator of schema ("" is DefaultSchema) on pool. It does
// not touch the database; a schema name the engine cannot use is the error
// of every method.
func New(pool *pgxpool.Pool, schema string) *Migrator {
	if schema == "" {
		schema = DefaultSchema
	}
	m := &Migrator{pool: pool, schema: schema, q: newQueries(schema)}
	if m.err = CheckSchema(schema); m.err == nil {
		m.all, m.err = load(schema)
	}
	return m
}

// Migrations returns every migration, oldest first, with its SQL written
// for the migrator's schema, for users who apply migrations with their own
// tool.
func (m *Migrator) Migrations() ([]Migration, error) {
	return append([]Migration(nil), m.all...), m.err
}

func load(schema string) ([]Migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.up.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	r := strings.NewReplacer("{{schema}}", schema)
	var out []Migration
	for _, up := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(up, "migrations/"), ".up.sql")
		num, name, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("idem: migration file %s has no number", up)
		}
		upSQL, err := migrationFiles.ReadFile(up)
		if err != nil {
			return nil, err
		}
		downSQL, err := migrationFiles.ReadFile("migrations/" + base + ".down.sql")
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, Up: r.Replace(string(upSQL)), Down: r.Replace(string(downSQL))})
	}
	return out, nil
}

// Up brings the schema up to the latest version. It is safe to call from
// many processes at once: they serialise on an advisory lock, and each
// migration commits together with its row in the version table. It
// returns the versions it applied.
func (m *Migrator) Up(ctx context.Context) ([]int, error) { return m.migrate(ctx, -1) }

// Down reverts the schema to version target (0 removes everything the
// migrations created; the schema and version table remain). It returns the
// versions it reverted. A records table distributed by Citus is made an
// ordinary table first (Undistribute), since the migrations revert one.
func (m *Migrator) Down(ctx context.Context, target int) ([]int, error) {
	if target < 0 {
		return nil, fmt.Errorf("idem: target version %d is negative", target)
	}
	if m.err != nil {
		return nil, m.err
	}
	if v, err := m.Version(ctx); err == nil && v > target {
		// The migrations revert a plain table: a distributed one is made
		// plain first (Undistribute), and stays so.
		if _, err := m.Undistribute(ctx); err != nil {
			return nil, err
		}
	}
	return m.migrate(ctx, target)
}

// Version returns the newest applied migration's version, 0 if none.
func (m *Migrator) Version(ctx context.Context) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	var v int
	err := m.pool.QueryRow(ctx, m.q.appliedVersion).Scan(&v)
	return v, err
}

// queries are the migrator's statements on the schema's migrations table.
type queries struct {
	lock, create, versions, appliedVersion, record, forget string
}

func newQueries(schema string) queries {
	t := schema + `.migrations`
	return queries{
		// One migration at a time per schema, whatever the process.
		lock: `SELECT pg_advisory_xact_lock(hashtext('idemgen.migrate.' || $1))`,
		create: `CREATE SCHEMA IF NOT EXISTS ` + schema + `;
CREATE TABLE IF NOT EXISTS ` + t + ` (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`,
		versions:       `SELECT version FROM ` + t,
		appliedVersion: `SELECT coalesce(max(version), 0) FROM ` + t,
		record:         `INSERT INTO ` + t + ` (version, name) VALUES ($1, $2)`,
		forget:         `DELETE FROM ` + t + ` WHERE version = $1`,
	}
}

func (m *Migrator) migrate(ctx context.Context, down int) ([]int, error) {
	if m.err != nil {
		return nil, m.err
	}
	all, q, schema := m.all, m.q, m.schema
	var applied []int
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, q.lock, schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, q.create); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, q.versions)
		if err != nil {
			return err
		}
		have, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		done := map[int]bool{}
		for _, v := range have {
			done[v] = true
		}
		if down < 0 {
			for _, mg := range all {
				if done[mg.Version] {
					continue
				}
				if _, err := tx.Exec(ctx, mg.Up); err != nil {
					return fmt.Errorf("idem: migration %d (%s): %w", mg.Version, mg.Name, err)
				}
				if _, err := tx.Exec(ctx, q.record, mg.Version, mg.Name); err != nil {
					return err
				}
				applied = append(applied, mg.Version)
			}
			return nil
		}
		for i := len(all) - 1; i >= 0; i-- {
			mg := all[i]
			if mg.Version <= down || !done[mg.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, mg.Down); err != nil {
				return fmt.Errorf("idem: reverting migration %d (%s): %w", mg.Version, mg.Name, err)
			}
			if _, err := tx.Exec(ctx, q.forget, mg.Version); err != nil {
				return err
			}
			applied = append(applied, mg.Version)
		}
		return nil
	})
	return applied, err
}
