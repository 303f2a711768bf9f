package idem

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

func checkSchema(schema string) error {
	if !schemaName.MatchString(schema) {
		return fmt.Errorf("idem: schema name %q must match %s", schema, schemaName)
	}
	return nil
}

// Migrations returns every migration, oldest first, with SQL written for
// schema, for users who apply migrations with their own tool (goose, tern,
// golang-migrate).
func Migrations(schema string) ([]Migration, error) {
	if err := checkSchema(schema); err != nil {
		return nil, err
	}
	names, err := fs.Glob(migrationFiles, "migrations/*.up.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
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
		r := strings.NewReplacer("{{schema}}", schema)
		out = append(out, Migration{Version: v, Name: name, Up: r.Replace(string(upSQL)), Down: r.Replace(string(downSQL))})
	}
	return out, nil
}

// migrationQueries are Migrate's statements on the schema's migrations
// table (migrate.go).
type migrationQueries struct {
	lock, create, versions, appliedVersion, record, forget string
}

func newMigrationQueries(schema string) migrationQueries {
	t := schema + `.migrations`
	return migrationQueries{
		// One Migrate at a time per schema, whatever the process.
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

// Migrate brings schema up to the latest version. It is safe to call from
// many processes at once: they serialise on an advisory lock, and each
// migration commits together with its row in the version table.
// It returns the versions it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) ([]int, error) {
	return migrate(ctx, pool, schema, -1)
}

// MigrateDown reverts schema to version target (0 removes everything the
// migrations created; the schema and version table remain).
func MigrateDown(ctx context.Context, pool *pgxpool.Pool, schema string, target int) ([]int, error) {
	if target < 0 {
		return nil, fmt.Errorf("idem: target version %d is negative", target)
	}
	return migrate(ctx, pool, schema, target)
}

// AppliedVersion returns the newest applied migration version, 0 if none.
func AppliedVersion(ctx context.Context, pool *pgxpool.Pool, schema string) (int, error) {
	if err := checkSchema(schema); err != nil {
		return 0, err
	}
	var v int
	err := pool.QueryRow(ctx, newMigrationQueries(schema).appliedVersion).Scan(&v)
	return v, err
}

func migrate(ctx context.Context, pool *pgxpool.Pool, schema string, down int) ([]int, error) {
	all, err := Migrations(schema)
	if err != nil {
		return nil, err
	}
	q := newMigrationQueries(schema)
	var applied []int
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
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
			for _, m := range all {
				if done[m.Version] {
					continue
				}
				if _, err := tx.Exec(ctx, m.Up); err != nil {
					return fmt.Errorf("idem: migration %d (%s): %w", m.Version, m.Name, err)
				}
				if _, err := tx.Exec(ctx, q.record, m.Version, m.Name); err != nil {
					return err
				}
				applied = append(applied, m.Version)
			}
			return nil
		}
		for i := len(all) - 1; i >= 0; i-- {
			m := all[i]
			if m.Version <= down || !done[m.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.Down); err != nil {
				return fmt.Errorf("idem: reverting migration %d (%s): %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, q.forget, m.Version); err != nil {
				return err
			}
			applied = append(applied, m.Version)
		}
		return nil
	})
	return applied, err
}
