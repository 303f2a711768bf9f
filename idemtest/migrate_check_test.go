package idemtest_test

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
)

//go:embed testdata/migrations/*.up.sql
var migrations embed.FS

// migrate applies the service's migrations in order, one transaction each,
// as golang-migrate's Up does (migrate.New("file://...", dsn).Up() fits
// Case.Migrate the same way).
func migrate(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	files, err := fs.Glob(migrations, "testdata/migrations/*.up.sql")
	if err != nil {
		return err
	}
	for _, f := range files { // in name order: 000001_, 000002_, ...
		sql, err := migrations.ReadFile(f)
		if err != nil {
			return err
		}
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, string(sql))
			return err
		}); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	return nil
}

// exams is a service written as the examination module of a modular
// monolith writes its SQL: schema-qualified, across schemas. Its kept
// handler validates the course (idem.Read, before the steps), books a
// paid proctoring session (idem.Foreign), and writes the exam and its
// event in its final transaction. poolWrite writes the event on the pool
// instead, outside the execution: broken.
type exams struct {
	pool      *pgxpool.Pool
	cards     *cards
	poolWrite bool
}

func (s *exams) start(ctx context.Context) (*idem.Response, error) {
	var proctored bool
	if err := idem.Read(ctx, s.pool).QueryRow(ctx, `SELECT proctored FROM catalog.courses WHERE id = 1`).Scan(&proctored); err != nil {
		return nil, err
	}
	booking, err := idem.Foreign(ctx, "book-proctoring", func(ctx context.Context, key string) (string, error) {
		return s.cards.charge(key, 4900), nil
	})
	if err != nil {
		return nil, err
	}
	db := idem.DB(ctx, s.pool)
	var id int64
	if err := db.QueryRow(ctx, `INSERT INTO examination.exams (course_id, student, proctoring) VALUES (1, 'ada', $1) RETURNING id`, booking).Scan(&id); err != nil {
		return nil, err
	}
	events := db
	if s.poolWrite {
		events = s.pool
	}
	if _, err := events.Exec(ctx, `INSERT INTO examination.outbox (exam_id, event) VALUES ($1, 'exam.started')`, id); err != nil {
		return nil, err
	}
	return &idem.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: fmt.Appendf(nil, `{"id":%d}`, id)}, nil
}

func examCase(poolWrite bool) idemtest.Case[struct{}] {
	cd := newCards()
	var pool *pgxpool.Pool
	return idemtest.Case[struct{}]{
		Operation: &idem.Operation{ID: "startExam", Policy: idem.Policy{Lease: 10 * time.Second, ReplayHeaders: []string{"Content-Type"}}},
		Scope:     "student_ada",
		Migrate:   migrate,
		Setup: func(_ context.Context, p *pgxpool.Pool) error {
			pool = p
			return nil
		},
		Handler: func() idem.Handler {
			s := &exams{pool: pool, cards: cd, poolWrite: poolWrite}
			return s.start
		},
		Recorder: cd.rec,
		Volatile: []string{"started_at"},
	}
}

// TestCheckRunsTheServicesOwnMigrations: a service whose SQL is
// schema-qualified (catalog.courses, examination.exams) and which has its
// own migrations runs them per scenario in a database of its own
// (Case.Migrate): Check passes the service as it is, and catches its
// broken variant, naming the schema-qualified table.
func TestCheckRunsTheServicesOwnMigrations(t *testing.T) {
	t.Parallel()
	t.Run("as it is", func(t *testing.T) {
		t.Parallel()
		idemtest.Check(t, examCase(false))
	})
	t.Run("an event written on the pool", func(t *testing.T) {
		t.Parallel()
		for _, f := range idemtest.Findings(t, examCase(true)) {
			if f.Rule == idemtest.RuleRows && strings.Contains(f.Detail, "table examination.outbox") {
				return
			}
		}
		t.Error("an event written outside the execution was not caught in examination.outbox")
	})
}
