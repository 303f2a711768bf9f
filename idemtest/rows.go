package idemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// rows is what the service's tables hold: per table, each row as JSON
// (members sorted, volatile columns left out), the rows sorted.
type rows map[string][]string

// rows reads the world's service tables. With renumber, the values of
// serial and identity columns, and of single-column foreign keys that
// reference them, are replaced by their rank among the column's values.
func (k *checker[S]) rows(ctx context.Context, w *world, renumber bool) rows {
	k.t.Helper()
	raw := map[string][]map[string]any{}
	for _, t := range w.tables {
		list, err := query(ctx, w.env.Pool, func(r pgx.CollectableRow) (map[string]any, error) {
			var s string
			if err := r.Scan(&s); err != nil {
				return nil, err
			}
			return decodeJSON([]byte(s))
		}, `SELECT to_jsonb(t)::text FROM `+w.ident(t)+` t`)
		if err != nil {
			k.t.Fatalf("idemtest.Check: reading table %s: %v", t, err)
		}
		raw[t] = list
	}
	if renumber {
		if err := renumberSerials(ctx, w.env.Pool, w.schemas, w.env.Schema, raw); err != nil {
			k.t.Fatalf("idemtest.Check: %v", err)
		}
	}
	out := rows{}
	for t, list := range raw {
		out[t] = []string{}
		for _, row := range list {
			for col := range row {
				if slices.Contains(k.c.Volatile, col) || slices.Contains(k.c.Volatile, t+"."+col) || slices.Contains(k.c.Volatile, w.rel[t].name+"."+col) {
					delete(row, col)
				}
			}
			b, err := json.Marshal(row)
			if err != nil {
				k.t.Fatalf("idemtest.Check: %v", err)
			}
			out[t] = append(out[t], string(b))
		}
		slices.Sort(out[t])
	}
	return out
}

// query sends sql and collects its rows with fn.
func query[T any](ctx context.Context, pool *pgxpool.Pool, fn pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rs, err := pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rs, fn)
}

func decodeJSON(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	return m, d.Decode(&m)
}

// diff says how r differs from want, table by table: "" when it does not.
// wantIs names want in the message: "the clean execution left".
func (r rows) diff(want rows, wantIs string) string {
	var tables []string
	for t := range want {
		tables = append(tables, t)
	}
	for t := range r {
		if _, ok := want[t]; !ok {
			tables = append(tables, t)
		}
	}
	slices.Sort(tables)
	var out []string
	for _, t := range tables {
		got, exp := r[t], want[t]
		if slices.Equal(got, exp) {
			continue
		}
		extra, missing := multisetDiff(got, exp)
		s := fmt.Sprintf("table %s has %d rows, %s %d", t, len(got), wantIs, len(exp))
		if len(extra) > 0 {
			s += "; extra: " + sample(extra)
		}
		if len(missing) > 0 {
			s += "; missing: " + sample(missing)
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// multisetDiff returns the elements of got not matched in want, and those
// of want not matched in got; both are sorted.
func multisetDiff(got, want []string) (extra, missing []string) {
	i, j := 0, 0
	for i < len(got) && j < len(want) {
		switch {
		case got[i] == want[j]:
			i, j = i+1, j+1
		case got[i] < want[j]:
			extra = append(extra, got[i])
			i++
		default:
			missing = append(missing, want[j])
			j++
		}
	}
	return append(extra, got[i:]...), append(missing, want[j:]...)
}

func sample(rows []string) string {
	const most = 3
	s := strings.Join(rows[:min(most, len(rows))], ", ")
	if len(rows) > most {
		s += fmt.Sprintf(" and %d more", len(rows)-most)
	}
	return s
}

// renumberSerials replaces, in raw, each serial or identity column's
// values (and those of single-column foreign keys referencing it) by their
// rank among the column's values, from 1. raw is by display name
// (relationName) of the tables of schemas (nil: every schema but the
// system's).
func renumberSerials(ctx context.Context, pool *pgxpool.Pool, schemas []string, home string, raw map[string][]map[string]any) error {
	type column struct{ Schema, Table, Name string }
	serials, err := query(ctx, pool, pgx.RowToStructByPos[column], `
SELECT n.nspname::text, c.relname::text, a.attname::text
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE `+inSchemas+` AND c.relkind = 'r'
  AND a.attnum > 0 AND NOT a.attisdropped
  AND pg_get_serial_sequence(format('%I.%I', n.nspname, c.relname), a.attname) IS NOT NULL`, schemas)
	if err != nil {
		return fmt.Errorf("finding serial columns: %w", err)
	}
	type reference struct{ Schema, Table, Name, RefSchema, RefTable, RefName string }
	refs, err := query(ctx, pool, pgx.RowToStructByPos[reference], `
SELECT n.nspname::text, c.relname::text, a.attname::text, rn.nspname::text, rc.relname::text, ra.attname::text
FROM pg_constraint co
JOIN pg_class c ON c.oid = co.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_class rc ON rc.oid = co.confrelid
JOIN pg_namespace rn ON rn.oid = rc.relnamespace
JOIN pg_attribute a ON a.attrelid = co.conrelid AND a.attnum = co.conkey[1]
JOIN pg_attribute ra ON ra.attrelid = co.confrelid AND ra.attnum = co.confkey[1]
WHERE co.contype = 'f' AND cardinality(co.conkey) = 1 AND `+inSchemas, schemas)
	if err != nil {
		return fmt.Errorf("finding foreign keys: %w", err)
	}
	for _, s := range serials {
		table := relationName(home, s.Schema, s.Table)
		var values []int64
		for _, row := range raw[table] {
			if v, ok := number(row[s.Name]); ok {
				values = append(values, v)
			}
		}
		slices.Sort(values)
		values = slices.Compact(values)
		rank := func(row map[string]any, col string) {
			if v, ok := number(row[col]); ok {
				if i, found := slices.BinarySearch(values, v); found {
					row[col] = json.Number(strconv.Itoa(i + 1))
				}
			}
		}
		for _, r := range refs {
			if r.RefSchema == s.Schema && r.RefTable == s.Table && r.RefName == s.Name {
				for _, row := range raw[relationName(home, r.Schema, r.Table)] {
					rank(row, r.Name)
				}
			}
		}
		for _, row := range raw[table] {
			rank(row, s.Name)
		}
	}
	return nil
}

func number(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

// inSchemas is the condition that a relation of namespace n is in $1's
// schemas, or in any schema but the system's when $1 is NULL.
const inSchemas = `(n.nspname = ANY($1) OR $1 IS NULL AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%')`

// relation is a table or sequence, by schema.
type relation struct{ schema, name string }

func (r relation) ident() string { return pgx.Identifier{r.schema, r.name}.Sanitize() }

// relationName is how findings name a relation: by its name in the home
// schema (the scenario's own), schema-qualified elsewhere.
func relationName(home, schema, name string) string {
	if schema == home {
		return name
	}
	return schema + "." + name
}

// listRelations lists the relations of one kind ("r" tables, "S"
// sequences) of schemas (nil: every schema but the system's), by display
// name (relationName), with where each is.
func listRelations(ctx context.Context, pool *pgxpool.Pool, schemas []string, home, kind string) ([]string, map[string]relation, error) {
	rels, err := query(ctx, pool, func(r pgx.CollectableRow) (relation, error) {
		var rel relation
		err := r.Scan(&rel.schema, &rel.name)
		return rel, err
	}, `SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE `+inSchemas+` AND c.relkind = $2::"char" ORDER BY 1, 2`, schemas, kind)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the relations: %w", err)
	}
	names, where := make([]string, 0, len(rels)), make(map[string]relation, len(rels))
	for _, r := range rels {
		n := relationName(home, r.schema, r.name)
		names = append(names, n)
		where[n] = r
	}
	return names, where, nil
}

func without(all, drop []string) []string {
	return slices.DeleteFunc(slices.Clone(all), func(s string) bool { return slices.Contains(drop, s) })
}

type seqState struct {
	last   int64
	called bool
}

// sequences reads where each of the service's sequences stands.
func (k *checker[S]) sequences(ctx context.Context, w *world) map[string]seqState {
	out := map[string]seqState{}
	for _, s := range w.seqs {
		var st seqState
		if err := w.env.Pool.QueryRow(ctx, `SELECT last_value, is_called FROM `+w.ident(s)).Scan(&st.last, &st.called); err != nil {
			k.t.Fatalf("idemtest.Check: reading sequence %s: %v", s, err)
		}
		out[s] = st
	}
	return out
}

// restoreSequences sets the sequences back to where sequences said they
// stood.
func (k *checker[S]) restoreSequences(ctx context.Context, w *world, seqs map[string]seqState) {
	for s, st := range seqs {
		if _, err := w.env.Pool.Exec(ctx, `SELECT setval($1::regclass, $2, $3)`, w.ident(s), st.last, st.called); err != nil {
			k.t.Fatalf("idemtest.Check: restoring sequence %s: %v", s, err)
		}
	}
}

// diffResponse says how got differs from want (status, the replayed
// headers, the body less the volatile pointers): "" when it does not.
func diffResponse(want, got *idem.Response, headers, volatile []string) string {
	if got.Status != want.Status {
		return fmt.Sprintf("status %d; the clean execution answered %d", got.Status, want.Status)
	}
	for _, h := range headers {
		if g, w := got.Header.Get(h), want.Header.Get(h); g != w {
			return fmt.Sprintf("header %s %q; the clean execution sent %q", h, g, w)
		}
	}
	gb, wb := got.Body, want.Body
	if len(volatile) > 0 {
		g, gerr := idemhttp.CanonicalJSON(gb, volatile)
		w, werr := idemhttp.CanonicalJSON(wb, volatile)
		if gerr == nil && werr == nil {
			gb, wb = g, w
		}
	}
	if !bytes.Equal(gb, wb) {
		return fmt.Sprintf("body %s; the clean execution answered %s", clip(gb), clip(wb))
	}
	return ""
}

// diffRendered compares a replay rendered again (Policy.Render) with the
// answer it stands for on what a render keeps: the status, the replay
// headers, and the values at the render pointers; its other fields show
// the resource as it is now.
func diffRendered(want, got *idem.Response, headers, pointers []string) string {
	if got.Header.Get(idem.RenderedHeader) != "true" {
		return "a replay of an operation that renders its replays is not marked " + idem.RenderedHeader
	}
	if d := diffResponse(want, &idem.Response{Status: got.Status, Header: got.Header, Body: want.Body}, headers, nil); d != "" {
		return d
	}
	// Numbers as the answers wrote them (json.Number): through a float64,
	// a 64-bit id and its rounded neighbour compare equal.
	var w, g any
	if err := decodeNumbers(want.Body, &w); err != nil {
		return "the answer is not JSON: " + err.Error()
	}
	if err := decodeNumbers(got.Body, &g); err != nil {
		return fmt.Sprintf("the rendered replay is not JSON (%v): %s", err, clip(got.Body))
	}
	for _, p := range pointers {
		wv, _ := idemtype.Lookup(w, p)
		gv, ok := idemtype.Lookup(g, p)
		wj, _ := json.Marshal(wv)
		gj, _ := json.Marshal(gv)
		if !ok || !bytes.Equal(wj, gj) {
			return fmt.Sprintf("the rendered replay's %s is %s; the answer's was %s", p, gj, wj)
		}
	}
	return ""
}

func decodeNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

func clip(b []byte) string {
	const most = 300
	if len(b) > most {
		return fmt.Sprintf("%q...", b[:most])
	}
	return fmt.Sprintf("%q", b)
}
