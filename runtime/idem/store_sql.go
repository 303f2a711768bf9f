package idem

import (
	"embed"
	"fmt"
	"io/fs"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The engine's SQL lives in sql/*.sql, each statement once, as a named
// block:
//
//	-- name: Advance :one
//	-- What it does and why (comment lines, kept in the file only).
//	WITH advanced AS (UPDATE {{schema}}.records ... WHERE id = @id ...)
//
// {{schema}} is the engine's schema. @name is a parameter: loading turns
// each into $n, numbered in the order the names first appear, and binds it
// from the field of the statement's params struct tagged db:"name"
// (store_params.go). Every statement as it is sent is in
// testdata/statements.golden.sql, checked by TestStatementsGolden.
//
//go:embed sql/*.sql sql/citus/*.sql
var sqlFiles embed.FS

// stmt is one loaded statement, whose parameters come from a P.
type stmt[P any] struct {
	name   string
	kind   string // sqlc's: :one, :many, :exec, :execrows
	sql    string // as sent
	params []string
	fields []int // fields[i] is the field of P bound to $i+1
}

// args binds p to the statement's parameters, in their order.
func (s *stmt[P]) args(p *P) []any {
	v := reflect.ValueOf(p).Elem()
	out := make([]any, len(s.fields))
	for i, f := range s.fields {
		out[i] = v.Field(f).Interface()
	}
	return out
}

// loader is what every field of statements is: a stmt of some params type.
type loader interface {
	// load loads src; partial allows fields of the params struct that src
	// does not name (a variant that needs fewer parameters).
	load(name, kind, src, schema string, partial bool) error
	text() (name, kind, sql string, params []string)
}

func (s *stmt[P]) text() (string, string, string, []string) { return s.name, s.kind, s.sql, s.params }

var paramName = regexp.MustCompile(`@[a-z_][a-z0-9_]*`)

func (s *stmt[P]) load(name, kind, src, schema string, partial bool) error {
	*s = stmt[P]{name: name, kind: kind}
	src = strings.ReplaceAll(src, "{{schema}}", schema)
	s.sql = paramName.ReplaceAllStringFunc(src, func(m string) string {
		p := m[1:]
		i := slices.Index(s.params, p)
		if i < 0 {
			s.params = append(s.params, p)
			i = len(s.params) - 1
		}
		return "$" + strconv.Itoa(i+1)
	})
	t := reflect.TypeFor[P]()
	byTag := map[string]int{}
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("db"); tag != "" {
			byTag[tag] = i
		}
	}
	for _, p := range s.params {
		f, ok := byTag[p]
		if !ok {
			return fmt.Errorf("statement %s: parameter @%s is no field of %s", name, p, t)
		}
		s.fields = append(s.fields, f)
		delete(byTag, p)
	}
	for tag := range byTag {
		// A record's placement is a parameter only of the placement
		// layout's statements (placed).
		// natural_key, only of the Natural variants (CompleteNatural).
		if partial || tag == "placement" || tag == "natural_key" {
			continue
		}
		return fmt.Errorf("statement %s: %s's field %q is no parameter of it", name, t, tag)
	}
	return nil
}

// block is one named statement of a .sql file, as written.
type block struct{ name, kind, src string }

// parseBlocks reads the named blocks of a .sql file. Comment lines are
// dropped; a statement's text ends at the next block and loses its final
// semicolon.
func parseBlocks(file, text string) ([]block, error) {
	var out []block
	var cur *block
	for n, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "-- name: "); ok {
			name, kind, ok := strings.Cut(rest, " ")
			if !ok || !slices.Contains([]string{":one", ":many", ":exec", ":execrows"}, kind) {
				return nil, fmt.Errorf("%s:%d: want -- name: <Name> :one|:many|:exec|:execrows", file, n+1)
			}
			out = append(out, block{name: name, kind: kind})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil || strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		cur.src += line + "\n"
	}
	for i := range out {
		out[i].src = strings.TrimSuffix(strings.TrimSpace(out[i].src), ";")
		if out[i].src == "" {
			return nil, fmt.Errorf("%s: statement %s is empty", file, out[i].name)
		}
	}
	return out, nil
}

// sqlRewrite, set only in a test's child process (mutants_internal_test.go),
// rewrites a statement's text before it is loaded, to remove one protecting
// clause.
var sqlRewrite func(name, src string) string

// loadStatements loads every block of sql/*.sql into the field of
// statements named for it, with schema filled in; with citus, the blocks
// of sql/citus/*.sql then replace those of the same name (a block there
// without one in sql/*.sql is an error). A block without a field, or a
// field without a block, is an error.
func loadStatements(schema string, citus bool) (statements, error) {
	return loadLayout(schema, layout{citus: citus, timeline: true})
}

// layout is what store.detect finds of the records table, which decides
// the statements: Citus' (sql/citus), the primary's timeline read or not,
// and records placed by a placement column (placed).
type layout struct {
	citus, timeline, placement bool
	// recording: the placement is written, records are found by id
	// (store.recording).
	recording bool
	// placementType is the placement column's type (format_type).
	placementType string
}

// loadStatementsTimeline is loadStatements, with timeline() replaced by
// NULL when timeline is false.
func loadStatementsTimeline(schema string, citus, timeline bool) (statements, error) {
	return loadLayout(schema, layout{citus: citus, timeline: timeline})
}

// timelineCall is how the statements read the primary's timeline
// (migration 006), and noTimeline what they read instead where the store
// refuses it (store.detect): no timeline, which is never taken for
// another.
const (
	timelineCall = "{{schema}}.timeline()"
	noTimeline   = "NULL::integer"
)

// loadLayout loads the statements of layout l.
func loadLayout(schema string, l layout) (statements, error) {
	var q statements
	fields := map[string]loader{}
	v := reflect.ValueOf(&q).Elem()
	for i := range v.NumField() {
		fields[v.Type().Field(i).Name] = v.Field(i).Addr().Interface().(loader)
	}
	all := map[string]loader{}
	for k, l := range fields {
		all[k] = l
	}
	if err := loadFiles("sql/*.sql", schema, false, l, fields); err != nil {
		return q, err
	}
	for name := range fields {
		return q, fmt.Errorf("idem: statements.%s has no block in sql/*.sql", name)
	}
	if l.citus {
		if err := loadFiles("sql/citus/*.sql", schema, true, l, all); err != nil {
			return q, err
		}
	}
	return q, nil
}

// loadFiles loads the blocks of the files matching glob into the fields
// named for them, deleting each from fields.
func loadFiles(glob, schema string, partial bool, lay layout, fields map[string]loader) error {
	files, err := fs.Glob(sqlFiles, glob)
	if err != nil {
		return err
	}
	for _, f := range files {
		text, err := sqlFiles.ReadFile(f)
		if err != nil {
			return err
		}
		blocks, err := parseBlocks(f, string(text))
		if err != nil {
			return err
		}
		for _, b := range blocks {
			l, ok := fields[b.name]
			if !ok {
				return fmt.Errorf("%s: statement %s has no field in statements, or is there twice", f, b.name)
			}
			delete(fields, b.name)
			src := b.src
			if !lay.timeline {
				src = strings.ReplaceAll(src, timelineCall, noTimeline)
			}
			if lay.placement {
				if src, err = placed(b.name, src, lay.placementType, lay.recording); err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
			}
			if sqlRewrite != nil {
				src = sqlRewrite(b.name, src)
			}
			if err := l.load(b.name, b.kind, src, schema, partial); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if nat, ok := naturalVariants[b.name]; ok {
				nsrc, err := naturalSQL(b.name, src)
				if err == nil {
					err = fields[nat].load(nat, b.kind, nsrc, schema, partial)
					delete(fields, nat)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
			}
		}
	}
	return nil
}

// each calls f with every statement, in statements' order.
func (q *statements) each(f func(name, kind, sql string, params []string)) {
	v := reflect.ValueOf(q).Elem()
	for i := range v.NumField() {
		f(v.Field(i).Addr().Interface().(loader).text())
	}
}
