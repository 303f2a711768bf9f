package idemcond

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Table is a table whose rows are resources with a version: the writes of
// its methods are conditional on a request's Preconditions, checked in the
// caller's transaction against the row as it is when the write takes its
// lock, and every write increments the version. Its names are written
// into the statements as SQL names them, unquoted: constants of your code,
// never a request's values.
//
// The version column is a bigint NOT NULL whose default is a new row's
// first version (DEFAULT 1). A row deleted and then created again starts
// from that default: an ETag of the old row matches the new one. Where an
// id can be created again, keep its deleted rows (a deleted_at column)
// instead.
type Table struct {
	// Name is the table: "orders", or schema-qualified, "shop.orders".
	Name string
	// Key is the columns that name one row, in the order of the key's
	// values: its primary key or another unique key (the account first,
	// on a table distributed by account, so that every statement names
	// it).
	Key []string
	// Version is the version column; "" is "version".
	Version string
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)

// names checks t and the key's values, and returns the version column.
func (t Table) names(key []any, columns []string) (string, error) {
	name, ver := t.Name, t.Version
	if ver == "" {
		ver = "version"
	}
	schema, table, ok := strings.Cut(name, ".")
	if !ok {
		table = schema
	}
	all := append([]string{table, ver}, t.Key...)
	if ok {
		all = append(all, schema)
	}
	for _, n := range append(all, columns...) {
		if !identifier.MatchString(n) {
			return "", fmt.Errorf("idemcond: table %q: %q is not an unquoted SQL name", name, n)
		}
	}
	if len(t.Key) == 0 {
		return "", fmt.Errorf("idemcond: table %q: Table.Key names no column", name)
	}
	if len(key) != len(t.Key) {
		return "", fmt.Errorf("idemcond: table %q: %d key values for the key (%s)", name, len(key), strings.Join(t.Key, ", "))
	}
	return ver, nil
}

// where is "k1 = $1 AND k2 = $2": the key's values come first in every
// statement's arguments.
func (t Table) where() string {
	conds := make([]string, len(t.Key))
	for i, k := range t.Key {
		conds[i] = k + " = $" + strconv.Itoa(i+1)
	}
	return strings.Join(conds, " AND ")
}

// lockTx reads the row's version and locks the row until tx ends: a
// concurrent write of it waits, and then reads the version this one
// writes.
func (t Table) lockTx(ctx context.Context, tx pgx.Tx, ver string, key []any) (Version, bool, error) {
	var v Version
	err := tx.QueryRow(ctx, "SELECT "+ver+" FROM "+t.Name+" WHERE "+t.where()+" FOR UPDATE", key...).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("idemcond: reading the version of a row of %s: %w", t.Name, err)
	}
	return v, true, nil
}

// sorted returns values' columns in order, so that the same columns are
// always the same statement.
func sorted(values map[string]any) []string {
	cols := make([]string, 0, len(values))
	for c := range values {
		cols = append(cols, c)
	}
	slices.Sort(cols)
	return cols
}

// InsertTx creates the row named by key with values (column: value) in tx,
// under If-None-Match: *, the precondition of a create: the row is
// inserted only if none has its key, and an existing row is a 412 *Error,
// with nothing written; another request creating it at the same time waits
// for it, and then gets the 412. Without If-None-Match: * it is a 428 *Error
// (If-Match, which needs a resource to match, a 412). It returns the new
// row's version, its column's default.
func (t Table) InsertTx(ctx context.Context, tx pgx.Tx, p Preconditions, key []any, values map[string]any) (Version, error) {
	cols := sorted(values)
	ver, err := t.names(key, cols)
	if err != nil {
		return 0, err
	}
	if p.ifMatchSent() {
		return 0, p.Check(0, false)
	}
	if !p.createOnly() {
		return 0, required(IfNoneMatch)
	}
	names := append(slices.Clone(t.Key), cols...)
	args := append(slices.Clone(key), make([]any, len(cols))...)
	params := make([]string, len(names))
	for i := range names {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	for i, c := range cols {
		args[len(key)+i] = values[c]
	}
	var v Version
	err = tx.QueryRow(ctx, "INSERT INTO "+t.Name+" ("+strings.Join(names, ", ")+") VALUES ("+strings.Join(params, ", ")+
		") ON CONFLICT ("+strings.Join(t.Key, ", ")+") DO NOTHING RETURNING "+ver, args...).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, failed("the resource exists, and If-None-Match: * creates only one that does not. GET it: it may be an earlier attempt of this very request")
	}
	if err != nil {
		return 0, fmt.Errorf("idemcond: inserting a row of %s: %w", t.Name, err)
	}
	return v, nil
}

// UpdateTx sets the columns of values (column: value) of the row named by
// key, and increments its version, in tx, when the request's If-Match (and
// If-None-Match, if sent) holds against the row's version, which it reads
// with the row locked: of two writes based on the same read, the second
// waits for the first, then gets a 412 *Error. A row that does not exist is
// a 404 *Error whatever the preconditions (RFC 9110, 13.2.1), and a request
// without If-Match a 428 *Error. It returns the row's new version.
func (t Table) UpdateTx(ctx context.Context, tx pgx.Tx, p Preconditions, key []any, values map[string]any) (Version, error) {
	cols := sorted(values)
	ver, err := t.names(key, cols)
	if err != nil {
		return 0, err
	}
	if len(cols) == 0 {
		return 0, fmt.Errorf("idemcond: updating a row of %s: no column to set", t.Name)
	}
	if err := t.checkTx(ctx, tx, p, ver, key); err != nil {
		return 0, err
	}
	set := make([]string, len(cols), len(cols)+1)
	args := slices.Clone(key)
	for i, c := range cols {
		set[i] = c + " = $" + strconv.Itoa(len(key)+i+1)
		args = append(args, values[c])
	}
	set = append(set, ver+" = "+ver+" + 1")
	var v Version
	err = tx.QueryRow(ctx, "UPDATE "+t.Name+" SET "+strings.Join(set, ", ")+" WHERE "+t.where()+" RETURNING "+ver, args...).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("idemcond: updating a row of %s: %w", t.Name, err)
	}
	return v, nil
}

// DeleteTx deletes the row named by key in tx when the request's If-Match
// (and If-None-Match, if sent) holds against its version, read with the
// row locked; as UpdateTx, a row that does not exist is a 404 *Error, a
// precondition that is false a 412 *Error, a request without If-Match a 428
// *Error.
func (t Table) DeleteTx(ctx context.Context, tx pgx.Tx, p Preconditions, key []any) error {
	ver, err := t.names(key, nil)
	if err != nil {
		return err
	}
	if err := t.checkTx(ctx, tx, p, ver, key); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "DELETE FROM "+t.Name+" WHERE "+t.where(), key...); err != nil {
		return fmt.Errorf("idemcond: deleting a row of %s: %w", t.Name, err)
	}
	return nil
}

// checkTx requires If-Match, locks the row and checks p against it.
func (t Table) checkTx(ctx context.Context, tx pgx.Tx, p Preconditions, ver string, key []any) error {
	if !p.ifMatchSent() {
		return required(IfMatch)
	}
	v, exists, err := t.lockTx(ctx, tx, ver, key)
	if err != nil {
		return err
	}
	if !exists {
		return &Error{Status: http.StatusNotFound, Detail: "no such resource: it was deleted, or never created"}
	}
	return p.Check(v, true)
}
