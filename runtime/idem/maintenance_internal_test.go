package idem

import (
	"context"
	"encoding/json"
	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/internal/adminlink"
	"testing"
)

// TestMaintenanceReadsOnlyClaimed: the stuck count at the end of every
// prune, and an operator's Abandoned, read the claimed records, not every
// record past its retention. After a prune of a large backlog the index
// entries of the records it deleted stay until vacuum; a count that
// walked them read the whole backlog again at the end of every prune,
// and claims beside it waited (docs/scaling.md, "The prune and the
// claims").
func TestMaintenanceReadsOnlyClaimed(t *testing.T) {
	dbtest.NotPlaced(t, "its records are written by hand, with no placement (the statements it tests are the same in both layouts, or pinned by the id layout's)")
	t.Parallel()
	r := newRaceEnv(t)
	ctx := context.Background()
	// Nothing cleans up behind the prune, as on a table autovacuum has
	// not reached yet.
	r.exec(`ALTER TABLE ` + r.schema + `.records SET (autovacuum_enabled = false)`)
	const old, live = 20000, 20000
	for _, seed := range []struct {
		n       int
		expires string
	}{{old, "now() - interval '1 second'"}, {live, "now() + interval '1 hour'"}} {
		r.exec(`INSERT INTO `+r.schema+`.records (id, fingerprint, expires_at, response_status, response_headers, response_body)
SELECT `+r.schema+`.record_id('ns', 't', $1 || g), '\x00', `+seed.expires+` - g * interval '1 millisecond', 200, '', ''
FROM generate_series(1, $2) g`, seed.expires, seed.n)
	}
	// Statistics as autovacuum would have gathered them before the prune
	// (the table's are off here, so that the prune's dead entries stay).
	r.exec(`ANALYZE ` + r.schema + `.records`)
	// One stuck record: past retention, its owner gone after a phase.
	r.exec(`INSERT INTO ` + r.schema + `.records (id, namespace, scope, key, operation, fingerprint, owner_token, lease_until, expires_at, recovery_point)
VALUES (` + r.schema + `.record_id('ns', 't', 'stuck'), 'ns', 't', 'stuck', 'op', '\x00', gen_random_uuid(), now() - interval '1 minute', now() - interval '1 hour', 'charge')`)
	if n, err := r.eng.prune(ctx, adminlink.PruneOptions{Batch: 1000}); err != nil || n != old {
		t.Fatalf("Prune = %d, %v; want %d", n, err, old)
	}
	for _, stats := range []string{"as they were before the prune", "gathered after it"} {
		if stats != "as they were before the prune" {
			r.exec(`ANALYZE ` + r.schema + `.records`)
		}
		for _, q := range []struct {
			name string
			sql  string
			args []any
		}{
			{"the stuck count", r.eng.store.q().CountStuck.sql, nil},
			{"Abandoned(stuck only)", r.eng.store.q().Abandoned.sql, r.eng.store.q().Abandoned.args(&abandonedParams{StuckOnly: true, Limit: 100})},
			{"Abandoned(all)", r.eng.store.q().Abandoned.sql, r.eng.store.q().Abandoned.args(&abandonedParams{StuckOnly: false, Limit: 100})},
		} {
			var plan []struct {
				Plan struct {
					Hit  int `json:"Shared Hit Blocks"`
					Read int `json:"Shared Read Blocks"`
				}
			}
			var out []byte
			if err := r.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+q.sql, q.args...).Scan(&out); err != nil {
				t.Fatalf("%s: %v", q.name, err)
			}
			if err := json.Unmarshal(out, &plan); err != nil || len(plan) != 1 {
				t.Fatalf("%s: reading the plan %s: %v", q.name, out, err)
			}
			// The claimed records' index and the stuck record's page; the
			// table is over a thousand pages.
			if blocks := plan[0].Plan.Hit + plan[0].Plan.Read; blocks > 20 {
				t.Errorf("%s, with statistics %s, read %d blocks for one claimed record among %d deleted and %d live; want at most 20. Plan:\n%s",
					q.name, stats, blocks, old, live, out)
			}
		}
	}
	if n, err := r.eng.store.countStuck(ctx); err != nil || n != 1 {
		t.Fatalf("countStuck = %d, %v; want 1", n, err)
	}
}
