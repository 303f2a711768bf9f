package idem_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestTimelineRefusedFallsBack: where a managed PostgreSQL refuses what
// timeline() reads (pg_current_wal_lsn: permission denied, or not
// supported), the engine does not fail every claim: it finds out once,
// logs it with the SQLSTATE, and runs without the failover signal (the
// records' timeline stays NULL, which is never taken for another one).
// Every claim mode, a takeover included.
func TestTimelineRefusedFallsBack(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		e.exec(`CREATE OR REPLACE FUNCTION ` + e.schema + `.timeline() RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
BEGIN RAISE EXCEPTION 'permission denied for function pg_current_wal_lsn' USING ERRCODE = 'insufficient_privilege'; END $$`)
		var logs logLines
		eng, err := idem.New(e.pool, idem.Options{Schema: e.schema, Claim: e.mode.claim, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := eng.Ready(ctx); err != nil {
			t.Fatalf("Ready: %v; want the engine to run without the failover signal", err)
		}
		for _, key := range []string{"timeline-key-0001", "timeline-key-0002"} {
			if _, err := idem.Run(ctx, eng, payOp, request("t", key, "b"), twoPhases(key)); err != nil {
				t.Fatalf("a request: %v", err)
			}
		}
		lines := logs.records(t, "idem: store error")
		if len(lines) != 1 || lines[0]["sqlstate"] != "42501" || !strings.Contains(lines[0]["step"].(string), "failover signal") {
			t.Errorf("log lines %v; want one warning, with SQLSTATE 42501, that the failover signal is off", lines)
		}
		if n := e.count(`SELECT count(*) FROM records WHERE timeline IS NOT NULL`); n != 0 {
			t.Errorf("%d records with a timeline; want none", n)
		}
	})
}
