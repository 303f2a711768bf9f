package idem_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

// renderOp stores a compact answer, the order's id, and renders its
// replays again; its store cap is far below the answer's 100 KB.
var renderOp = &idem.Operation{ID: "createReport", Policy: idem.Policy{Lease: 30 * time.Second, Render: []string{"/id"}, MaxReplayBody: 1024}}

// report is a 100 KB answer about row key: its id, its note as it is now,
// and the lines of the report.
func report(id int64, note string) []byte {
	return fmt.Appendf(nil, `{"id":%d,"note":%q,"lines":%q}`, id, note, strings.Repeat("x", 100<<10))
}

func reportPhases(key string, renderWrites bool) []idem.Phase[payState] {
	return []idem.Phase[payState]{{
		Name: "create",
		Final: func(ctx context.Context, tx pgx.Tx, _ *payState) (*idem.Response, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO rows (key, note) VALUES ($1, 'new')`, key); err != nil {
				return nil, err
			}
			return &idem.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/reports/7"}}, Body: report(7, "new")}, nil
		},
		Render: func(ctx context.Context, tx pgx.Tx, ref idem.Reference) (*idem.Response, error) {
			id, err := ref.Int64("/id")
			if err != nil {
				return nil, err
			}
			if renderWrites {
				if _, err := tx.Exec(ctx, `UPDATE rows SET note = 'rendered' WHERE key = $1`, key); err != nil {
					return nil, err
				}
			}
			var note string
			if err := tx.QueryRow(ctx, `SELECT note FROM rows WHERE key = $1`, key).Scan(&note); err != nil {
				return nil, err
			}
			return &idem.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/elsewhere"}}, Body: report(id, note)}, nil
		},
	}}
}

// TestRenderedReplay: an operation that renders its replays answers its
// 100 KB report in full once, stores a few dozen bytes, and every replay
// (from the record, and from the replay cache) is rendered again: the
// first answer's status and Location, the resource as it is now (a note
// changed since shows its current value), marked Idempotent-Rendered. A
// render that writes fails the replay, saying so. In every claim mode.
func TestRenderedReplay(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		first, err := idem.Run(ctx, e.eng, renderOp, request("t", "r1", "b"), reportPhases("r1", false))
		if err != nil || first.Replayed || first.Response.Status != 201 || !bytes.Equal(first.Response.Body, report(7, "new")) {
			t.Fatalf("the first answer: %v, %v", first, err)
		}
		var stored int
		if err := e.pool.QueryRow(ctx, `SELECT octet_length(response_body) FROM records`).Scan(&stored); err != nil || stored > 64 {
			t.Errorf("the record keeps %d bytes of body (%v); want the reference only", stored, err)
		}
		info, err := idemadmin.Inspect(ctx, e.eng, renderOp.ID, "t", "r1")
		if err != nil || string(info.Reference) != `{"/id":7}` {
			t.Errorf("Inspect: reference %s (%v); want {\"/id\":7}", info.Reference, err)
		}
		e.exec(`UPDATE rows SET note = 'shipped' WHERE key = 'r1'`)
		for i := range 2 { // from the record, then from the cache
			out, err := idem.Run(ctx, e.eng, renderOp, request("t", "r1", "b"), reportPhases("r1", false))
			if err != nil {
				t.Fatal(err)
			}
			r := out.Response
			if !out.Replayed || r.Status != 201 || r.Header.Get("Location") != "/reports/7" || r.Header.Get(idem.RenderedHeader) != "true" || !bytes.Equal(r.Body, report(7, "shipped")) {
				t.Errorf("replay %d: replayed %t, %d %v, %d bytes; want 201 at /reports/7, rendered, the current note", i, out.Replayed, r.Status, r.Header, len(r.Body))
			}
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'r1'`); n != 1 {
			t.Errorf("%d rows: a replay executed", n)
		}

		if _, err := idem.Run(ctx, e.eng, renderOp, request("t", "w1", "b"), reportPhases("w1", true)); err != nil {
			t.Fatal(err)
		}
		_, err = idem.Run(ctx, e.eng, renderOp, request("t", "w1", "b"), reportPhases("w1", true))
		if err == nil || !strings.Contains(err.Error(), "a render only reads") {
			t.Errorf("a render that writes: %v; want the replay to fail saying a render only reads", err)
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'w1' AND note = 'rendered'`); n != 0 {
			t.Errorf("the render's write committed")
		}
	})
}

// TestStoredModeKeepsItsCap: the same 100 KB answer, stored byte for byte
// (no replay.render), is over the cap: it goes out once, is not stored
// (EventNotStored, idemgen_events_total{event="not_stored"}), and its retry
// gets 410 response-not-stored, whose way out is replay.render.
func TestStoredModeKeepsItsCap(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		op := &idem.Operation{ID: "createReport", Policy: idem.Policy{Lease: 30 * time.Second, MaxReplayBody: 1024}}
		phases := reportPhases("s1", false)
		phases[0].Render = nil
		first, err := idem.Run(ctx, e.eng, op, request("t", "s1", "b"), phases)
		if err != nil || first.Response.Status != 201 || len(first.Response.Body) < 100<<10 {
			t.Fatalf("the first answer: %v, %v", first, err)
		}
		if n := e.ev.count(idem.EventNotStored); n != 1 {
			t.Errorf("%d not_stored events, want 1", n)
		}
		again, err := idem.Run(ctx, e.eng, op, request("t", "s1", "b"), phases)
		if err != nil || again.Response.Status != 410 {
			t.Errorf("the retry: %v, %v; want 410", again, err)
		}
	})
}

// TestRenderedOperationStoresItsRefusalsWhole: an operation that renders
// its replays answers a 404 from a phase (idem.Answer), whose body has no
// /id: it is stored byte for byte and replayed as it is, not rendered.
func TestRenderedOperationStoresItsRefusalsWhole(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		phases := reportPhases("nf", false)
		notFound := &idem.Response{Status: 404, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"title":"no such account"}`)}
		phases = append([]idem.Phase[payState]{{Name: "look", Local: func(context.Context, pgx.Tx, *payState) error { return idem.Answer(notFound) }}}, phases...)
		for i := range 2 {
			out, err := idem.Run(ctx, e.eng, renderOp, request("t", "nf", "b"), phases)
			if err != nil || out.Response.Status != 404 || !bytes.Equal(out.Response.Body, notFound.Body) || out.Response.Header.Get(idem.RenderedHeader) != "" {
				t.Fatalf("attempt %d: %v, %v; want the 404 as it was, not rendered", i, out, err)
			}
		}
	})
}

// TestRenderedReplayKeepsLargeIDsExact: a 64-bit id past float64's 53
// bits (1234567890123456789) is kept in the reference as the answer wrote
// it, and the render gets it exactly: a rounded id would render another
// resource. In every claim mode.
func TestRenderedReplayKeepsLargeIDsExact(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const id = int64(1234567890123456789)
		var rendered int64
		phases := []idem.Phase[payState]{{
			Name: "create",
			Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
				return &idem.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: fmt.Appendf(nil, `{"id":%d,"amount":1.50}`, id)}, nil
			},
			Render: func(_ context.Context, _ pgx.Tx, ref idem.Reference) (*idem.Response, error) {
				var err error
				rendered, err = ref.Int64("/id")
				return &idem.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: fmt.Appendf(nil, `{"id":%d}`, rendered)}, err
			},
		}}
		if _, err := idem.Run(ctx, e.eng, renderOp, request("t", "big", "b"), phases); err != nil {
			t.Fatal(err)
		}
		info, err := idemadmin.Inspect(ctx, e.eng, renderOp.ID, "t", "big")
		if err != nil || string(info.Reference) != `{"/id":1234567890123456789}` {
			t.Errorf("the stored reference: %s (%v); want {\"/id\":1234567890123456789}", info.Reference, err)
		}
		out, err := idem.Run(ctx, e.eng, renderOp, request("t", "big", "b"), phases)
		if err != nil || rendered != id || string(out.Response.Body) != `{"id":1234567890123456789}` {
			t.Errorf("the replay rendered id %d, body %s (%v); want %d", rendered, out.Response.Body, err, id)
		}
	})
}

// TestRenderedOperationStoresBodilessAnswersWhole: a 204, and a 202 with
// no body, of an operation that renders its replays are no resource to
// render: they are stored byte for byte and replayed as they were, the
// effect committed once. In every claim mode, with a committed phase
// before the last (separate mode's stuck key).
func TestRenderedOperationStoresBodilessAnswersWhole(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, status := range []int{204, 202} {
			key := fmt.Sprint("empty", status)
			phases := []idem.Phase[payState]{
				{Name: "reserve", Local: func(ctx context.Context, tx pgx.Tx, _ *payState) error {
					_, err := tx.Exec(ctx, `INSERT INTO rows (key) VALUES ($1)`, key)
					return err
				}},
				{Name: "finish", Final: func(context.Context, pgx.Tx, *payState) (*idem.Response, error) {
					return &idem.Response{Status: status, Header: http.Header{"Location": {"/jobs/1"}}}, nil
				}, Render: func(context.Context, pgx.Tx, idem.Reference) (*idem.Response, error) {
					return nil, fmt.Errorf("a bodiless answer was rendered")
				}},
			}
			for i := range 2 {
				out, err := idem.Run(ctx, e.eng, renderOp, request("t", key, "b"), phases)
				if err != nil || out.Response.Status != status || len(out.Response.Body) != 0 || out.Replayed != (i == 1) || out.Response.Header.Get(idem.RenderedHeader) != "" {
					t.Fatalf("%d, attempt %d: %+v, %v; want the %d as it was, replayed the second time, not rendered", status, i, out, err, status)
				}
			}
			if n := e.count(`SELECT count(*) FROM rows WHERE key = $1`, key); n != 1 {
				t.Errorf("%d: %d rows, want 1", status, n)
			}
		}
	})
}

// TestRenderCannotMakeItsTransactionWrite: a render that turns its
// read-only transaction into a read-write one (SET TRANSACTION READ
// WRITE) before writing is refused, and nothing it wrote commits.
func TestRenderCannotMakeItsTransactionWrite(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		phases := reportPhases("rw", false)
		phases[0].Render = func(ctx context.Context, tx pgx.Tx, _ idem.Reference) (*idem.Response, error) {
			if _, err := tx.Exec(ctx, `SET TRANSACTION READ WRITE`); err != nil {
				return nil, err
			}
			if _, err := tx.Exec(ctx, `UPDATE rows SET note = 'rendered' WHERE key = 'rw'`); err != nil {
				return nil, err
			}
			return &idem.Response{Status: 200, Body: []byte(`{}`)}, nil
		}
		if _, err := idem.Run(ctx, e.eng, renderOp, request("t", "rw", "b"), phases); err != nil {
			t.Fatal(err)
		}
		if _, err := idem.Run(ctx, e.eng, renderOp, request("t", "rw", "b"), phases); err == nil || !strings.Contains(err.Error(), "a render only reads") {
			t.Errorf("a render that set its transaction READ WRITE: %v; want the replay to fail saying a render only reads", err)
		}
		if n := e.count(`SELECT count(*) FROM rows WHERE key = 'rw' AND note = 'rendered'`); n != 0 {
			t.Errorf("the render's write committed")
		}
	})
}

// keptReport is a report's implementation in a version of the service
// whose spec turned replay.render off: it keeps the Render method of the
// version before, as the generated glue's idem.KeptRender finds it.
type keptReport struct{ key string }

func (k keptReport) Render(ctx context.Context, tx pgx.Tx, ref idem.Reference) (*idem.Response, error) {
	return reportPhases(k.key, false)[0].Render(ctx, tx, ref)
}

// TestRenderTurnedOffKeepsStoredReferencesReplayable: a rolling deploy
// that turns replay.render off. The old version (render on) and the new
// one (render off, the Render method kept) serve the same records at
// once: a reference stored by the old version replays, rendered, through
// either, and the new version stores its own answers byte for byte. A new
// version without the method fails such a replay saying to keep it. In
// every claim mode.
func TestRenderTurnedOffKeepsStoredReferencesReplayable(t *testing.T) {
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		old := reportPhases("r1", false)
		off := &idem.Operation{ID: renderOp.ID, Policy: idem.Policy{Lease: 30 * time.Second, MaxReplayBody: 1 << 20}}
		newPhases := func(impl any, key string) []idem.Phase[payState] {
			p := reportPhases(key, false)
			p[0].Render = idem.KeptRender(impl, func(r *idem.Response) (*idem.Response, error) { return r, nil })
			return p
		}
		if _, err := idem.Run(ctx, e.eng, renderOp, request("t", "r1", "b"), old); err != nil {
			t.Fatal(err)
		}
		newer := mustEngineWith(t, e, idem.Options{ReplayCacheBytes: -1})
		for _, v := range []struct {
			name   string
			eng    *idem.Engine
			op     *idem.Operation
			phases []idem.Phase[payState]
		}{{"the old version", e.eng, renderOp, old}, {"the new version", newer, off, newPhases(keptReport{"r1"}, "r1")}} {
			out, err := idem.Run(ctx, v.eng, v.op, request("t", "r1", "b"), v.phases)
			if err != nil || !out.Replayed || out.Response.Header.Get(idem.RenderedHeader) != "true" || !bytes.Equal(out.Response.Body, report(7, "new")) {
				t.Fatalf("%s replaying the old version's reference: %+v, %v; want it rendered", v.name, out, err)
			}
		}
		// The new version's own answer is stored whole, and replays as it is.
		if _, err := idem.Run(ctx, newer, off, request("t", "n1", "b"), newPhases(keptReport{"n1"}, "n1")); err != nil {
			t.Fatal(err)
		}
		out, err := idem.Run(ctx, newer, off, request("t", "n1", "b"), newPhases(keptReport{"n1"}, "n1"))
		if err != nil || out.Response.Header.Get(idem.RenderedHeader) != "" || !bytes.Equal(out.Response.Body, report(7, "new")) {
			t.Fatalf("the new version's own answer replayed: %+v, %v; want it byte for byte", out, err)
		}
		// Without the method: the replay says what to do.
		_, err = idem.Run(ctx, newer, off, request("t", "r1", "b"), newPhases(struct{}{}, "r1"))
		if err == nil || !strings.Contains(err.Error(), "keep the Render method") {
			t.Fatalf("a new version without Render replaying a reference: %v; want an error saying to keep the method", err)
		}
	})
}
