// Package exampledb gives the runnable examples of runtime/idem and
// runtime/idemecho a pool on the test package's database (internal/dbtest's,
// so the package's TestMain must call dbtest.Main). Examples have no
// testing.T, hence this rather than dbtest.Pool; it is the one place to
// switch when a public test helper (idemtest) gives users the same.
//
// The pool has no search_path of its own (a transaction pooler would refuse
// one), so the examples name their schemas, which Pool drops before and
// after.
package exampledb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/dbtest"
)

// Pool returns a pool on the package's database without the given schemas,
// and a function that drops them and closes the pool. It panics when the
// database cannot be had (its message says how to fix that).
func Pool(schemas ...string) (*pgxpool.Pool, func()) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.Env().URL)
	if err != nil {
		panic(fmt.Sprintf("exampledb: %v", err))
	}
	drop := func() {
		for _, s := range schemas {
			if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+s+` CASCADE`); err != nil {
				panic(fmt.Sprintf("exampledb: %v", err))
			}
		}
	}
	drop()
	return pool, func() { drop(); pool.Close() }
}
