package main

import (
	"context"
	"embed"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

// The layout study (-layouts): the bytes a completed record costs in the
// engine's table (A) and in candidate layouts that would cost less, each
// at the price of something the engine reads or keeps today. Each layout is
// one file in layouts/, its header saying what it changes and what it
// loses; docs/scaling.md ("Bytes per record") has the figures.
//
//go:embed layouts/*.sql
var layoutFiles embed.FS

// layouts are the study's layouts, in the order they are measured and
// printed. The first is today's: the engine's migrations, loaded by its
// file.
var layouts = []string{"A", "A4", "B1", "D2", "E3b", "E8a", "E10b"}

// layoutSource is the schema of the records every layout loads (src.sql).
const layoutSource = "layout_src"

// layoutFigure is one layout's bytes per record.
type layoutFigure struct {
	Name    string
	Records int64
	Heap    float64 // the main fork
	Toast   float64 // the TOAST table and its index
	Maps    float64 // the free space and visibility maps
	Indexes []indexSize
	Total   float64 // pg_total_relation_size
	Row     float64 // pg_column_size of the whole row
	Body    float64 // pg_column_size(response_body)
	Headers float64 // pg_column_size(response_headers)
	State   float64 // pg_column_size(phase_state)
	// BeyondBody is Total less the stored body, the figure of issue 12;
	// BeyondAll is that less the headers and the phase state too.
	BeyondBody, BeyondAll float64
}

func layoutSchema(name string) string { return "layout_" + strings.ToLower(name) }

// runLayouts builds each layout in a schema of its own, loads records
// completed records into it, vacuums, checkpoints and measures it, then
// drops it, and prints the figures.
func runLayouts(ctx context.Context, url string, records int, w io.Writer) ([]layoutFigure, error) {
	if records <= 0 {
		return nil, fmt.Errorf("-layout-records %d: want at least one record", records)
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	b := &bench{admin: admin}
	server, err := b.server(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "storebench -layouts: %s\n", server)
	fmt.Fprintf(w, "%s completed records, each layout in a schema of its own (internal/storebench/layouts/*.sql)\n", count(int64(records)))

	src, err := layoutFiles.ReadFile("layouts/src.sql")
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if _, err := admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+layoutSource+` CASCADE; CREATE SCHEMA `+layoutSource); err != nil {
		return nil, err
	}
	defer admin.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+layoutSource+` CASCADE`)
	srcConn, err := layoutConn(ctx, url, layoutSource)
	if err != nil {
		return nil, err
	}
	_, err = srcConn.Exec(ctx, string(src), records)
	srcConn.Close(context.Background())
	if err != nil {
		return nil, fmt.Errorf("layouts/src.sql: %w", err)
	}
	fmt.Fprintf(w, "   source records made in %s\n", secs(time.Since(began)))

	var figs []layoutFigure
	for _, name := range layouts {
		f, err := measureLayout(ctx, admin, url, name, w)
		if err != nil {
			return nil, fmt.Errorf("layout %s: %w", name, err)
		}
		figs = append(figs, f)
	}

	fmt.Fprintf(w, "\nbytes per record, %s completed records (heap, TOAST, free space and visibility maps, each index; in all; the row; beyond the body; beyond body, headers and phase state):\n",
		count(int64(records)))
	for _, f := range figs {
		fmt.Fprintf(w, "%s\n", f)
	}
	return figs, nil
}

// layoutConn connects with schema, then the source records' schema, on the
// search path: the layout files name neither.
func layoutConn(ctx context.Context, url, schema string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["search_path"] = schema + ", " + layoutSource
	return pgx.ConnectConfig(ctx, cfg)
}

// measureLayout builds, loads and measures one layout, and drops it.
func measureLayout(ctx context.Context, admin *pgx.Conn, url, name string, w io.Writer) (layoutFigure, error) {
	f := layoutFigure{Name: name}
	sql, err := layoutFiles.ReadFile("layouts/" + name + ".sql")
	if err != nil {
		return f, err
	}
	schema := layoutSchema(name)
	if _, err := admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE; CREATE SCHEMA `+schema); err != nil {
		return f, err
	}
	defer admin.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
	began := time.Now()
	if name == layouts[0] {
		// Today's layout is what the migrations make, not a copy of it.
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return f, err
		}
		_, err = idemmigrate.New(pool, schema).Up(ctx)
		pool.Close()
		if err != nil {
			return f, err
		}
	}
	fmt.Fprintf(w, "   %s: loading\n", name)
	conn, err := layoutConn(ctx, url, schema)
	if err != nil {
		return f, err
	}
	defer conn.Close(context.Background())
	// No arguments: the simple protocol, which runs the file's statements
	// (its DDL, then its INSERT) as one transaction.
	if _, err := conn.Exec(ctx, string(sql)); err != nil {
		return f, err
	}
	vac := time.Now()
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) records`); err != nil {
		return f, err
	}
	if _, err := conn.Exec(ctx, `CHECKPOINT`); err != nil {
		return f, err
	}
	var heap, maps, table, total int64
	err = conn.QueryRow(ctx, `SELECT count(*), avg(pg_column_size(r.*)), avg(coalesce(pg_column_size(response_body), 0)),
    avg(coalesce(pg_column_size(response_headers), 0)), avg(coalesce(pg_column_size(phase_state), 0)),
    pg_relation_size('records'::regclass, 'main'), pg_relation_size('records'::regclass, 'fsm') + pg_relation_size('records'::regclass, 'vm'),
    pg_table_size('records'::regclass), pg_total_relation_size('records'::regclass)
FROM records r`).Scan(&f.Records, &f.Row, &f.Body, &f.Headers, &f.State, &heap, &maps, &table, &total)
	if err != nil {
		return f, err
	}
	if f.Records == 0 {
		return f, fmt.Errorf("no records loaded")
	}
	indexes, err := indexSizes(ctx, conn, "records", f.Records)
	if err != nil {
		return f, err
	}
	n := float64(f.Records)
	f.Heap, f.Maps, f.Toast = float64(heap)/n, float64(maps)/n, float64(table-heap-maps)/n
	f.Indexes = indexes
	f.Total = float64(total) / n
	f.BeyondBody = f.Total - f.Body
	f.BeyondAll = f.BeyondBody - f.Headers - f.State
	fmt.Fprintf(w, "   %s: loaded %s in %s; VACUUM (ANALYZE) and CHECKPOINT %s\n", name, count(f.Records), secs(vac.Sub(began)), secs(time.Since(vac)))
	return f, nil
}

func (f layoutFigure) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "%-5s heap %.1f, toast %.1f, maps %.1f", f.Name, f.Heap, f.Toast, f.Maps)
	for _, ix := range f.Indexes {
		fmt.Fprintf(&s, ", %s %.1f", ix.Name, ix.PerRecord)
	}
	fmt.Fprintf(&s, "; in all %.1f; row %.1f; beyond body (%.1f) %.1f; beyond body, headers (%.1f) and phase state (%.1f) %.1f",
		f.Total, f.Row, f.Body, f.BeyondBody, f.Headers, f.State, f.BeyondAll)
	return s.String()
}
