package routers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	renderapi "github.com/idemgen/idemgen/golden/render_replay/out"
	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstd"
)

const reportSchema = `CREATE TABLE reports (id bigserial PRIMARY KEY, account text NOT NULL, status text NOT NULL DEFAULT 'preparing')`

// reportLines are a report's 100 KB of lines.
func reportLines(account string) []string {
	lines := make([]string, 1000)
	for i := range lines {
		lines[i] = fmt.Sprintf("%s %04d %s", account, i, strings.Repeat(".", 90))
	}
	return lines
}

// reports is golden/render_replay's service: a report is created once,
// and its representation is rendered from the row whenever asked.
type reports struct {
	pool        *pgxpool.Pool
	renderWrite bool // a broken render, which writes
}

func (s *reports) load(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id int64) (renderapi.Report, error) {
	var account, status string
	if err := q.QueryRow(ctx, `SELECT account, status FROM reports WHERE id = $1`, id).Scan(&account, &status); err != nil {
		return renderapi.Report{}, err
	}
	return renderapi.Report{Id: id, Status: status, Lines: reportLines(account)}, nil
}

func (s *reports) Execute(ctx context.Context, tx pgx.Tx, request renderapi.CreateReportRequestObject, _ *renderapi.CreateReportState) (renderapi.CreateReportResponseObject, error) {
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO reports (account) VALUES ($1) RETURNING id`, request.Body.Account).Scan(&id); err != nil {
		return nil, err
	}
	report, err := s.load(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	location := fmt.Sprintf("/reports/%d", id)
	return renderapi.CreateReport201JSONResponse{Body: report, Headers: renderapi.CreateReport201ResponseHeaders{Location: &location}}, nil
}

func (s *reports) Render(ctx context.Context, tx pgx.Tx, reference idem.Reference) (renderapi.CreateReportResponseObject, error) {
	id, err := reference.Int64("/id")
	if err != nil {
		return nil, err
	}
	if s.renderWrite {
		if _, err := tx.Exec(ctx, `UPDATE reports SET status = 'seen' WHERE id = $1`, id); err != nil {
			return nil, err
		}
	}
	report, err := s.load(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	return renderapi.CreateReport201JSONResponse{Body: report}, nil
}

func (s *reports) GetReport(ctx context.Context, request renderapi.GetReportRequestObject) (renderapi.GetReportResponseObject, error) {
	report, err := s.load(ctx, s.pool, request.Id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	return renderapi.GetReport200JSONResponse(report), err
}

// TestRenderedReportReplays: a 100 KB report, its record a few dozen
// bytes of body, is answered in full to its first request and rendered
// again for every retry: the first answer's status, Location and id, the
// status it has now, marked Idempotent-Rendered; never 410. A render that
// writes fails the replay with a 500 that says so, and writes nothing.
func TestRenderedReportReplays(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, reportSchema); err != nil {
		t.Fatal(err)
	}
	svc := &reports{pool: env.Pool}
	h, err := renderapi.Register(nil, svc, renderapi.Phases{CreateReport: svc}, &idemstd.Runtime{Engine: env.Engine})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(key string) (*http.Response, renderapi.Report) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/reports", strings.NewReader(`{"account":"acme"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var r renderapi.Report
		if resp.StatusCode < 300 {
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatalf("%d %s: %v", resp.StatusCode, body[:min(len(body), 200)], err)
			}
		}
		return resp, r
	}
	first, report := post("r-1")
	if first.StatusCode != 201 || report.Status != "preparing" || len(report.Lines) != 1000 || first.Header.Get("Location") != "/reports/1" {
		t.Fatalf("the first answer: %d %v, %s, %d lines", first.StatusCode, first.Header, report.Status, len(report.Lines))
	}
	var stored, total int
	if err := env.Pool.QueryRow(ctx, `SELECT octet_length(response_body), octet_length(response_body) + octet_length(response_headers::text) FROM records`).Scan(&stored, &total); err != nil || stored > 64 {
		t.Errorf("the record keeps %d bytes of body (%v); want the reference only", stored, err)
	}
	t.Logf("a %d KB answer kept as %d bytes of body, %d with its headers", 100, stored, total)
	if _, err := env.Pool.Exec(ctx, `UPDATE reports SET status = 'ready'`); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		again, r := post("r-1")
		if again.StatusCode != 201 || again.Header.Get("Idempotent-Replayed") != "true" || again.Header.Get(idem.RenderedHeader) != "true" ||
			again.Header.Get("Location") != "/reports/1" || r.Id != report.Id || r.Status != "ready" || len(r.Lines) != 1000 {
			t.Errorf("replay %d: %d %v, id %d, %s, %d lines; want 201 at /reports/1, rendered, id %d, ready", i, again.StatusCode, again.Header, r.Id, r.Status, len(r.Lines), report.Id)
		}
	}
	var n int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM reports`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d reports: a retry executed", n)
	}

	svc.renderWrite = true
	post("r-2")
	broken, _ := post("r-2")
	if broken.StatusCode != 500 {
		t.Errorf("a render that writes: %d; want 500", broken.StatusCode)
	}
	var seen int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM reports WHERE status = 'seen'`).Scan(&seen); err != nil || seen != 0 {
		t.Errorf("the render's write committed (%d, %v)", seen, err)
	}
}
