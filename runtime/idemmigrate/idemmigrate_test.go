package idemmigrate_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

// TestMigrations: the SQL of every migration is written for the schema,
// numbered in order, and a schema the engine cannot use is every method's
// error, before anything reaches a database. The migrations' effect on a
// database is tested with the engine (runtime/idem's TestMigrate and
// TestUpgrade*).
func TestMigrations(t *testing.T) {
	all, err := idemmigrate.New(nil, "tenant_a").Migrations()
	if err != nil || len(all) == 0 {
		t.Fatalf("Migrations = %d, %v", len(all), err)
	}
	for i, m := range all {
		if m.Version != i+1 || m.Name == "" || strings.Contains(m.Up+m.Down, "{{schema}}") || !strings.Contains(m.Up, "tenant_a.") {
			t.Errorf("migration %d: version %d, name %q, schema not filled in", i, m.Version, m.Name)
		}
	}
	if d, _ := idemmigrate.New(nil, "").Migrations(); !strings.Contains(d[0].Up, idemmigrate.DefaultSchema+".") {
		t.Error(`New(pool, "") does not use the default schema`)
	}
	bad := idemmigrate.New(nil, "Bad-Name; DROP")
	if _, err := bad.Migrations(); err == nil {
		t.Error("Migrations accepted a bad schema name")
	}
	if _, err := bad.Up(context.Background()); err == nil || !strings.Contains(err.Error(), "schema name") {
		t.Errorf("Up with a bad schema name: %v", err)
	}
	if _, err := bad.Version(context.Background()); err == nil {
		t.Error("Version accepted a bad schema name")
	}
	if _, err := idemmigrate.New(nil, "s").Down(context.Background(), -1); err == nil {
		t.Error("Down accepted a negative target")
	}
}
