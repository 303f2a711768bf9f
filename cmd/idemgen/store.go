package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
	"github.com/idemgen/idemgen/spec"
)

func init() {
	register("migrate", "apply (up), revert (down N) or print (sql) the store's migrations; distribute the records table on Citus", runMigrate)
	register("prune", "delete records past their retention, in batches", runPrune)
	register("inspect", "show one key's record: state, recovery point, lease, owner, age", runInspect)
	register("abandoned", "list claims whose owner's lease expired (-stuck: only those past retention)", runAbandoned)
	register("resolve", "settle one abandoned claim: -delete it, or -complete it with a problem", runResolve)
	register("reconcile", "list natural keys (x-idempotency natural-key) completed under more than one idempotency key since -since", runReconcile)
}

type dbFlags struct {
	url    *string
	schema *string
}

func addDBFlags(fs *flag.FlagSet) dbFlags {
	return dbFlags{
		url:    fs.String("database", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL)"),
		schema: fs.String("schema", idem.DefaultSchema, "schema of the idempotency tables"),
	}
}

func (d dbFlags) pool(ctx context.Context) (*pgxpool.Pool, error) {
	if *d.url == "" {
		return nil, errors.New("no database: pass -database or set DATABASE_URL")
	}
	return pgxpool.New(ctx, *d.url)
}

// withEngine opens the database and an engine on the flags' schema, runs f
// with them, and closes the pool.
func (d dbFlags) withEngine(f func(ctx context.Context, eng *idem.Engine) error) error {
	ctx := context.Background()
	pool, err := d.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	eng, err := idem.New(pool, idem.Options{Schema: *d.schema})
	if err != nil {
		return err
	}
	return f(ctx, eng)
}

// opFlags name the operation whose records a command reads: its key
// namespace, the group of a grouped operation, which -spec maps an
// operationId to.
type opFlags struct {
	name *string
	spec *string
}

func addOpFlags(fs *flag.FlagSet) opFlags {
	return opFlags{
		name: fs.String("operation", "", "operationId (with -spec, that of a grouped operation too), or the group name of grouped operations"),
		spec: fs.String("spec", "", "the OpenAPI document, to map an operationId to its x-idempotency group"),
	}
}

// namespace is the key namespace -operation names: with -spec, the group of
// the operation of that operationId, or the operationId; without, the name
// as given (an operationId or a group).
func (o opFlags) namespace() (string, error) {
	if *o.spec == "" {
		return *o.name, nil
	}
	doc, err := spec.Load(*o.spec)
	if err != nil {
		return "", err
	}
	for _, op := range doc.Idempotent() {
		switch {
		case op.OperationID == *o.name && op.Idempotency.Group != "":
			return op.Idempotency.Group, nil
		case op.OperationID == *o.name, op.Idempotency.Group == *o.name:
			return *o.name, nil
		}
	}
	return "", fmt.Errorf("%s has no operation %q with x-idempotency, nor a group of that name", *o.spec, *o.name)
}

// notFound is the error for a record that is not there, with what the
// operator may have meant: when -operation is an operationId whose claimed
// records sit under a group, that group.
func (o opFlags) notFound(ctx context.Context, eng *idem.Engine, ns, scope, key string) error {
	msg := fmt.Sprintf("no record for operation %q, scope %q, key %q (never used, released, or pruned)", ns, scope, key)
	if *o.spec != "" {
		return errors.New(msg)
	}
	groups, err := idemadmin.NamespacesOf(ctx, eng, *o.name)
	if err == nil && len(groups) > 0 && groups[0] != *o.name {
		return fmt.Errorf("%s; records of operation %s are under its group %q: name it, -operation %s, or pass -spec SPEC to map operationIds to groups", msg, *o.name, groups[0], groups[0])
	}
	return fmt.Errorf("%s; if %s is in an x-idempotency group, name the group, or pass -spec SPEC to map operationIds to groups", msg, *o.name)
}

func runMigrate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("migrate", stderr)
	db := addDBFlags(fs)
	format := fs.String("format", "plain", "with sql: plain, or goose (adds goose Up/Down annotations)")
	colocate := fs.String("colocate-with", "", "with distribute or place: a distributed table of the service's; the records are distributed by a placement column of its distribution column's type and co-located with it (docs/scaling.md, \"Placement by tenant\")")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: idemgen migrate [flags] up | down VERSION | sql | distribute | place | undistribute\n\n  up            apply every pending migration\n  down N        revert to version N (0 reverts all)\n  sql           print the migrations' SQL for goose, tern or golang-migrate users\n  distribute    on a Citus coordinator: distribute the records table by its id, or with -colocate-with by placement (idempotent)\n  place         with -colocate-with: the first step of moving a records table laid out by id to placement: add the placement column; restart the services, then distribute once every record has one\n  undistribute  make a distributed records table an ordinary table again (idempotent)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	switch fs.Arg(0) {
	case "sql":
		ms, err := idemmigrate.New(nil, *db.schema).Migrations()
		if err != nil {
			return err
		}
		for _, m := range ms {
			switch *format {
			case "goose":
				fmt.Fprintf(stdout, "-- %03d_%s.sql\n-- +goose Up\nCREATE SCHEMA IF NOT EXISTS %s;\n%s\n-- +goose Down\n%s\n", m.Version, m.Name, *db.schema, m.Up, m.Down)
			case "plain":
				fmt.Fprintf(stdout, "-- %03d_%s.up.sql\nCREATE SCHEMA IF NOT EXISTS %s;\n%s\n-- %03d_%s.down.sql\n%s\n", m.Version, m.Name, *db.schema, m.Up, m.Version, m.Name, m.Down)
			default:
				return fmt.Errorf("-format %q: want plain or goose", *format)
			}
		}
		return nil
	case "place":
		if *colocate == "" {
			return errors.New("migrate place: say the table to co-locate the records with: -colocate-with TABLE")
		}
		pool, err := db.pool(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		added, err := idemmigrate.New(pool, *db.schema).PreparePlacement(ctx, idemmigrate.DistributeOptions{ColocateWith: *colocate})
		if err != nil {
			return err
		}
		if added {
			fmt.Fprintf(stdout, "schema %s: records table has a placement column; restart every service on it, then run distribute -colocate-with %s once the records made before have expired\n", *db.schema, *colocate)
		} else {
			fmt.Fprintf(stdout, "schema %s: records table already has a placement column\n", *db.schema)
		}
		return nil
	case "distribute", "undistribute":
		pool, err := db.pool(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		m := idemmigrate.New(pool, *db.schema)
		var changed bool
		if fs.Arg(0) == "distribute" {
			changed, err = m.DistributeBy(ctx, idemmigrate.DistributeOptions{ColocateWith: *colocate})
		} else {
			changed, err = m.Undistribute(ctx)
		}
		if err != nil {
			return err
		}
		dist, err := m.Distributed(ctx)
		if err != nil {
			return err
		}
		column := idemmigrate.DistributionColumn
		if *colocate != "" {
			column = idemmigrate.PlacementColumn + ", co-located with " + *colocate
		}
		state := map[bool]string{true: "distributed by " + column, false: "not distributed"}[dist]
		if changed {
			fmt.Fprintf(stdout, "schema %s: records table now %s; restart the services on it\n", *db.schema, state)
		} else {
			fmt.Fprintf(stdout, "schema %s: records table already %s\n", *db.schema, state)
		}
		return nil
	case "up", "down":
		pool, err := db.pool(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		var applied []int
		if fs.Arg(0) == "up" {
			applied, err = idemmigrate.New(pool, *db.schema).Up(ctx)
		} else {
			target, perr := strconv.Atoi(fs.Arg(1))
			if perr != nil {
				fs.Usage()
				return errUsage
			}
			applied, err = idemmigrate.New(pool, *db.schema).Down(ctx, target)
		}
		if err != nil {
			return err
		}
		v, err := idemmigrate.New(pool, *db.schema).Version(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schema %s: %s %v; now at version %d\n", *db.schema, map[string]string{"up": "applied", "down": "reverted"}[fs.Arg(0)], applied, v)
		return nil
	}
	fs.Usage()
	return errUsage
}

func runPrune(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("prune", stderr)
	db := addDBFlags(fs)
	// The defaults are the pace measured beside live claims;
	// -batch 1000 -rest 0 catches up on a backlog at full pace.
	batch := fs.Int("batch", idemadmin.PruneBesideClaims.Batch, "records deleted per transaction")
	rest := fs.Float64("rest", idemadmin.PruneBesideClaims.Rest, "pause after each batch, as a multiple of the time it took (1: the pruner runs at most half of the time, leaving the database to claims in between; 0: full pace)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rest < 0 {
		return fmt.Errorf("-rest %v: want 0 or more", *rest)
	}
	return db.withEngine(func(ctx context.Context, eng *idem.Engine) error {
		n, err := idemadmin.Prune(ctx, eng, idemadmin.PruneOptions{Batch: *batch, Rest: *rest})
		fmt.Fprintf(stdout, "pruned %d records\n", n)
		return err
	})
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", stderr)
	db := addDBFlags(fs)
	op := addOpFlags(fs)
	scope := fs.String("scope", "", "scope value: the principal, the scope header's value, or empty for global")
	key := fs.String("key", "", "the Idempotency-Key (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *op.name == "" || *key == "" {
		fmt.Fprintln(stderr, "idemgen inspect: -operation and -key are required")
		fs.PrintDefaults()
		return errUsage
	}
	ns, err := op.namespace()
	if err != nil {
		return err
	}
	return db.withEngine(func(ctx context.Context, eng *idem.Engine) error {
		info, err := idemadmin.Inspect(ctx, eng, ns, *scope, *key)
		if errors.Is(err, pgx.ErrNoRows) {
			return op.notFound(ctx, eng, ns, *scope, *key)
		}
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	})
}

func runAbandoned(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("abandoned", stderr)
	db := addDBFlags(fs)
	op := addOpFlags(fs)
	stuck := fs.Bool("stuck", false, "only records past their retention (never pruned: they wait for you)")
	limit := fs.Int("limit", 100, "list at most this many, oldest lease first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ns := ""
	if *op.name != "" {
		var err error
		if ns, err = op.namespace(); err != nil {
			return err
		}
	}
	return db.withEngine(func(ctx context.Context, eng *idem.Engine) error {
		// -operation: that namespace's, or, without -spec, the claims of
		// that operationId in any group.
		q := idemadmin.AbandonedQuery{StuckOnly: *stuck, Limit: *limit, Namespace: ns}
		if *op.spec == "" {
			q.Operation = ns
		}
		list, err := idemadmin.Abandoned(ctx, eng, q)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		n := 0
		for _, r := range list {
			if err := enc.Encode(r); err != nil {
				return err
			}
			n++
		}
		fmt.Fprintf(stderr, "%d abandoned claim(s)\n", n)
		return nil
	})
}

func runReconcile(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("reconcile", stderr)
	db := addDBFlags(fs)
	since := fs.String("since", "", "list executions completed since: a time (RFC 3339, such as 2026-12-07T14:00:00Z) or a duration back from now (such as 24h); required")
	limit := fs.Int("limit", 100, "list at most this many natural keys, the latest first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	from, err := sinceFlag(*since, time.Now())
	if err != nil {
		return err
	}
	return db.withEngine(func(ctx context.Context, eng *idem.Engine) error {
		list, err := idemadmin.Reconcile(ctx, eng, from, *limit)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		for _, d := range list {
			if err := enc.Encode(d); err != nil {
				return err
			}
		}
		fmt.Fprintf(stderr, "%d natural key(s) completed under more than one idempotency key since %s\n", len(list), from.UTC().Format(time.RFC3339))
		return nil
	})
}

// sinceFlag reads -since: an RFC 3339 time, or a duration back from now.
func sinceFlag(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("reconcile: -since is required: a time (2026-12-07T14:00:00Z) or a duration back from now (24h); after a failover, the time of the primary_changed event")
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("reconcile: -since %s: want a positive duration back from now (such as 24h)", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("reconcile: -since %q: want a time (RFC 3339, such as 2026-12-07T14:00:00Z) or a duration back from now (such as 24h)", s)
	}
	if t.After(now) {
		return time.Time{}, fmt.Errorf("reconcile: -since %s is in the future; give a time in the past, such as the last failover's", s)
	}
	return t, nil
}

func runResolve(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("resolve", stderr)
	db := addDBFlags(fs)
	op := addOpFlags(fs)
	scope := fs.String("scope", "", "scope value: the principal, the scope header's value, or empty for global")
	key := fs.String("key", "", "the Idempotency-Key (required, unless -id)")
	id := fs.String("id", "", "the record's id, as 'idemgen abandoned' lists it: in place of -scope and -key, for a record whose scope you do not know (it keeps only its digest)")
	del := fs.Bool("delete", false, "delete the record: a retry then executes from the start, whatever the committed phases did")
	complete := fs.Bool("complete", false, "complete the record with a problem response that every retry gets")
	status := fs.Int("status", 500, "with -complete: the problem's HTTP status (400 to 599)")
	detail := fs.String("detail", "", "with -complete: the problem's detail, shown to the client")
	retention := fs.Duration("retention", 0, "with -complete: how long the answer is replayed (default: the operation's own retention, from now)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: idemgen resolve -operation OP [-spec SPEC] ([-scope S] -key K | -id ID) (-delete | -complete [-status N] [-detail TEXT])\n\n"+
			"Settles one abandoned claim (see 'idemgen abandoned'). Nothing happens without -delete or -complete.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *op.name == "" || (*key == "") == (*id == "") || *del == *complete {
		fs.Usage()
		return errUsage
	}
	ns, err := op.namespace()
	if err != nil {
		return err
	}
	return db.withEngine(func(ctx context.Context, eng *idem.Engine) error {
		res := idemadmin.Resolution{Delete: *del, Status: *status, Detail: *detail, Retention: *retention}
		if *id != "" {
			if err := idemadmin.ResolveID(ctx, eng, *id, res); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return fmt.Errorf("no record has id %s", *id)
				}
				return err
			}
			fmt.Fprintf(stdout, "settled record %s (%s)\n", *id, map[bool]string{true: "deleted: the key is free", false: fmt.Sprintf("completed with a %d problem", *status)}[*del])
			return nil
		}
		err := idemadmin.Resolve(ctx, eng, ns, *scope, *key, res)
		if errors.Is(err, pgx.ErrNoRows) {
			return op.notFound(ctx, eng, ns, *scope, *key)
		}
		if err != nil {
			return err
		}
		if *del {
			fmt.Fprintf(stdout, "deleted the record of %s key %q: the key is free\n", ns, *key)
		} else {
			fmt.Fprintf(stdout, "completed the record of %s key %q with a %d problem\n", ns, *key, *status)
		}
		return nil
	})
}
