// Command pgbenchmodel measures what the idempotency protocol must cost in
// SQL alone: pgbench runs each shape of statements a request sends, on the
// engine's own tables, at 1 and 16 clients, side by side on one durable
// PostgreSQL, with prepared statements. `make bench-model` runs it;
// docs/performance.md keeps the table. The shapes are written by hand after
// the engine's statements (runtime/idem/sql/*.sql), with the same columns and
// indexes, so that the figures bound what the engine can reach.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/pglocal"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
)

// A shape is one pgbench script: the statements of one request. Keys are
// random per transaction (pgbench's random over 10^15, with the client id),
// so that new-key shapes never collide.
type shape struct {
	name, what, script string
}

const key = `\set k random(1, 1000000000000000)
`

// The record's columns as the engine writes them (a 12-byte body, the
// Content-Type header, coded). pgbench cannot hash, so the server computes
// each record's id and receipt fingerprint here (record_id and
// receipt_fingerprint), which the engine computes and sends: the shapes
// that use them cost a few microseconds a statement more than the
// engine's.
const (
	recordKey   = `'bench', 'principal-acct', 'k' || CAST(:client_id AS text) || '-' || CAST(:k AS text)`
	fingerprint = `'\x0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'::bytea`
	headers     = `'\x1f106170706c69636174696f6e2f6a736f6e'::bytea`
	claimInsert = `INSERT INTO m.records (id, namespace, scope, key, owner_token, operation, fingerprint, lease_until,
    request, background, expires_at, key_derivation)
SELECT m.record_id(n, s, k), n, s, k, gen_random_uuid(), 'bench', ` + fingerprint + `,
    now() + interval '30 seconds', NULL, false, now() + interval '1 day', 2
FROM (VALUES (` + recordKey + `)) AS r (n, s, k) ON CONFLICT DO NOTHING;
`
	complete = `UPDATE m.records SET owner_token = NULL, lease_until = NULL, created_at = NULL, attempts = NULL,
    key_derivation = NULL, fingerprint = m.receipt_fingerprint(operation, fingerprint), operation = NULL,
    namespace = NULL, scope = NULL, key = NULL, recovery_point = NULL, phase_state = NULL, request = NULL, background = NULL,
    response_status = 201, response_headers = ` + headers + `, response_body = '{"id":12345}',
    body_omitted = false, expires_at = clock_timestamp() + interval '1 day'
WHERE id = m.record_id(` + recordKey + `);
`
	read = `SELECT coalesce(operation, ''), fingerprint, CASE WHEN owner_token IS NOT NULL THEN 'claimed' WHEN id IS NOT NULL THEN 'completed' END,
    owner_token, coalesce(lease_until > now(), false), expires_at <= now(),
    recovery_point, phase_state, response_status, response_headers, response_body, body_omitted
FROM m.records WHERE id = m.record_id('bench', 'principal-acct', %s);
`
	work = `INSERT INTO m.bench (amount) VALUES (100) RETURNING id;
`
	// The payments shape's recovery point after its first local phase: the
	// phase state and the lease, as the engine's advance writes them.
	advance = `UPDATE m.records SET recovery_point = 'record', phase_state = '{"Recorded": true, "ChargeID": ""}',
    lease_until = GREATEST(lease_until, clock_timestamp() + interval '30 seconds'),
    expires_at = GREATEST(expires_at, clock_timestamp() + interval '1 day')
WHERE id = m.record_id(` + recordKey + `) AND owner_token IS NOT NULL;
`
)

var shapes = []shape{
	{"plain", "one autocommit INSERT", work},
	{"plain-tx", "BEGIN, INSERT, COMMIT", "BEGIN;\n" + work + "COMMIT;\n"},
	{"separate", "claim INSERT (own commit), then BEGIN, INSERT, completing UPDATE, COMMIT",
		key + claimInsert + "BEGIN;\n" + work + complete + "COMMIT;\n"},
	{"first", "one transaction: BEGIN, claim INSERT, INSERT, completing UPDATE, COMMIT",
		key + "BEGIN;\n" + claimInsert + work + complete + "COMMIT;\n"},
	{"last", "read of the key, BEGIN, INSERT, completed record INSERT, COMMIT",
		key + fmt.Sprintf(read, "'k' || CAST(:client_id AS text) || '-' || CAST(:k AS text)") + "BEGIN;\n" + work +
			`INSERT INTO m.records (id, fingerprint, response_status, response_headers, response_body, body_omitted,
    expires_at, created_at, attempts, key_derivation, background, recovery_point)
VALUES (m.record_id(` + recordKey + `), m.receipt_fingerprint('bench', ` + fingerprint + `), 201, ` + headers + `,
    '{"id":12345}', false, clock_timestamp() + interval '1 day', NULL, NULL, NULL, NULL, NULL);
COMMIT;
`},
	{"three-phase", "the payments shape: BEGIN, claim INSERT, INSERT, recovery-point UPDATE, COMMIT; (the foreign call); BEGIN, UPDATE, completing UPDATE, COMMIT",
		key + "BEGIN;\n" + claimInsert + "INSERT INTO m.bench (amount) VALUES (100) RETURNING id \\gset\n" + advance + "COMMIT;\n" +
			"BEGIN;\nUPDATE m.bench SET charge = 'ch_' || :id WHERE id = :id;\n" + complete + "COMMIT;\n"},
	{"replay", "one SELECT of a completed record", fmt.Sprintf(read, "'replayed'")},
}

func main() {
	seconds := flag.Int("T", 10, "seconds per run")
	runs := flag.Int("runs", 3, "runs of each shape at each concurrency (the median is printed)")
	only := flag.String("shapes", "", "a regular expression: run only the shapes whose names match")
	flag.Parse()
	re, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgbenchmodel: -shapes:", err)
		os.Exit(2)
	}
	if err := run(*seconds, *runs, re); err != nil {
		fmt.Fprintln(os.Stderr, "pgbenchmodel:", err)
		os.Exit(1)
	}
}

func run(seconds, runs int, only *regexp.Regexp) error {
	ctx := context.Background()
	bin, err := pglocal.BinDir()
	if err != nil {
		return err
	}
	env, err := pglocal.Open(ctx, "pgbenchmodel", pglocal.Options{Durable: true})
	if err != nil {
		return err
	}
	defer env.Close()
	if err := setup(ctx, env.URL); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pgbenchmodel")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("pgbench, durable PostgreSQL, prepared statements, %d runs of %ds each, median transactions/s:\n\n", runs, seconds)
	fmt.Println("| shape | SQL per request | 1 client | 16 clients |")
	fmt.Println("|---|---|---:|---:|")
	for _, s := range shapes {
		if !only.MatchString(s.name) {
			continue
		}
		file := filepath.Join(dir, s.name+".sql")
		if err := os.WriteFile(file, []byte(s.script), 0o644); err != nil {
			return err
		}
		var cols [2]string
		for i, clients := range []int{1, 16} {
			var tps []float64
			for r := 0; r < runs; r++ {
				fmt.Fprintf(os.Stderr, "%s, %d clients, run %d of %d\n", s.name, clients, r+1, runs)
				t, err := pgbench(ctx, bin, env.URL, file, clients, seconds)
				if err != nil {
					return fmt.Errorf("%s: %w", s.name, err)
				}
				tps = append(tps, t)
			}
			cols[i] = strconv.FormatFloat(median(tps), 'f', 0, 64)
		}
		fmt.Printf("| %s | %s | %s | %s |\n", s.name, s.what, cols[0], cols[1])
	}
	return nil
}

// setup migrates the engine's tables into schema m, adds the business table
// and the completed record that the replay shape reads.
func setup(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := idemmigrate.New(pool, "m").Up(ctx); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `CREATE TABLE m.bench (id bigserial PRIMARY KEY, amount int, charge text);
INSERT INTO m.records (id, fingerprint, response_status, response_headers, response_body, expires_at,
    created_at, attempts, key_derivation, background, recovery_point)
VALUES (m.record_id('bench', 'principal-acct', 'replayed'), m.receipt_fingerprint('bench', `+fingerprint+`), 201,
    `+headers+`, '{"id":1}', now() + interval '1 day', NULL, NULL, NULL, NULL, NULL)`)
	return err
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+)`)

func pgbench(ctx context.Context, bin, url, file string, clients, seconds int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds+60)*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pgbench"), "-n", "-M", "prepared", "-c", strconv.Itoa(clients),
		"-j", "2", "-T", strconv.Itoa(seconds), "-f", file, url)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%w\n%s", err, out.Bytes())
	}
	m := tpsLine.FindSubmatch(out.Bytes())
	if m == nil {
		return 0, fmt.Errorf("no tps in pgbench's output:\n%s", out.Bytes())
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}
