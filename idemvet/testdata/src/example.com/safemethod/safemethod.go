// Package safemethod holds a newsletter's handlers. Those of GET, HEAD and
// OPTIONS operations must change nothing: a mail scanner or a link
// previewer fetches a link it finds, and its fetch must not unsubscribe.
package safemethod

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/cardnet"
	"example.com/db"
	"example.com/webapi"
)

type Server struct {
	Pool  *pgxpool.Pool
	HTTP  *http.Client
	Cards *cardnet.Client
}

var _ webapi.StrictServerInterface = (*Server)(nil)

// Unsubscribe changes state on a GET: the scanner's fetch unsubscribes.
func (s *Server) Unsubscribe(ctx context.Context, request webapi.RequestObject) (webapi.ResponseObject, error) { // want Unsubscribe:"changes state: writes to the database via \\(\\*pgxpool.Pool\\).Exec"
	_, err := s.Pool.Exec(ctx, "UPDATE subscribers SET unsubscribed_at = now() WHERE token = $1", request.Token) // want `^Server.Unsubscribe \(GET /unsubscribe\): safe-method: s.Pool.Exec writes to the database, but a GET request must change nothing: mail scanners, link previewers and prefetchers send it unasked; answer it with a page whose form POSTs, and make the change in that POST \(docs/testing.md, "A GET that changes state"\)$`
	return nil, err
}

// GetSubscription only reads: a query that locks, an Exec that sets a
// timeout, a batch of reads, a GET to another system.
func (s *Server) GetSubscription(ctx context.Context, request webapi.RequestObject) (webapi.ResponseObject, error) { // want GetSubscription:"reaches the network via \\(\\*http.Client\\).Get"
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '1s'"); err != nil {
		return nil, err
	}
	var email string
	if err := tx.QueryRow(ctx, `SELECT email FROM subscribers -- not UPDATE
		WHERE token = $1 AND note <> 'DELETE me' FOR NO KEY UPDATE`, request.Token).Scan(&email); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	b.Queue("SELECT count(*) FROM subscribers")
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if _, err := s.HTTP.Get("https://avatars.example/" + email); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://avatars.example/"+email, nil)
	if err != nil {
		return nil, err
	}
	return nil, s.forward(req.WithContext(ctx))
}

// forward sends what it is given: its caller says with which method.
func (s *Server) forward(r *http.Request) error { // want forward:"reaches the network via \\(\\*http.Client\\).Do"
	_, err := s.HTTP.Do(r)
	return err
}

// HeadSubscription writes through a transaction it begins, and through
// sqlc's queries.
func (s *Server) HeadSubscription(ctx context.Context, request webapi.RequestObject) (webapi.ResponseObject, error) { // want HeadSubscription:"changes state: writes to the database via \\(pgx.Tx\\).Exec"
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO hits (token) VALUES ($1)", request.Token); err != nil { // want `^Server.HeadSubscription \(HEAD /subscriptions/\{token\}\): safe-method: tx.Exec writes to the database, but a HEAD request must change nothing`
		return nil, err
	}
	if err := db.New(tx).InsertPayment(ctx, 1); err != nil { // want `: safe-method: db.New\(tx\).InsertPayment writes to the database \(via \(db.DBTX\).Exec\), but a HEAD request`
		return nil, err
	}
	return nil, tx.Commit(ctx)
}

// OptionsSubscriptions writes through a helper of its own.
func (s *Server) OptionsSubscriptions(ctx context.Context, request webapi.RequestObject) (webapi.ResponseObject, error) { // want OptionsSubscriptions:"changes state: writes to the database via \\(pgx.Tx\\).CopyFrom"
	return nil, s.load(ctx) // want `^Server.OptionsSubscriptions \(OPTIONS /subscriptions\): safe-method: s.load writes to the database \(via \(pgx.Tx\).CopyFrom\), but an OPTIONS request must change nothing`
}

func (s *Server) load(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"hits"}, []string{"token"}, nil)
		return err
	})
}

// Confirm calls other systems with POST: directly, through a request made
// by a helper, and through a client in another package.
func (s *Server) Confirm(ctx context.Context, request webapi.RequestObject) (webapi.ResponseObject, error) { // want Confirm:"reaches the network via \\(\\*http.Client\\).Do" Confirm:"changes state: calls another system with POST via \\(\\*http.Client\\).Do"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://crm.example/confirmed", nil)
	if err != nil {
		return nil, err
	}
	if _, err := s.HTTP.Do(req); err != nil { // want `^Server.Confirm \(GET /confirm\): safe-method: s.HTTP.Do calls another system with POST, but a GET request must change nothing`
		return nil, err
	}
	if _, err := http.Post("https://crm.example/hooks", "application/json", nil); err != nil { // want `safe-method: http.Post calls another system with POST, but`
		return nil, err
	}
	hook, err := newHook(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.HTTP.Do(hook); err != nil { // want `safe-method: s.HTTP.Do calls another system with PUT, but`
		return nil, err
	}
	if _, err := s.Cards.Charge(ctx, request.Token, cardnet.Request{Amount: 1}); err != nil { // want `safe-method: s.Cards.Charge calls another system with POST \(via \(\*http.Client\).Do\), but`
		return nil, err
	}
	return nil, nil
}

// newHook makes a request; its caller sends it.
func newHook(ctx context.Context) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, "", "https://crm.example/hook", nil)
	if err != nil {
		return nil, err
	}
	req.Method = "put"
	return req, nil
}

// Feed writes an access log, which changes nothing a reader sees: a
// directive says so.
func (s *Server) Feed(ctx context.Context, request webapi.RequestObject) (webapi.ResponseObject, error) { // want Feed:"changes state"
	//idemgen:ignore an access log: a scanner's fetch changes nothing a reader sees
	_, err := s.Pool.Exec(ctx, "INSERT INTO access_log (path) VALUES ('/feed')")
	return nil, err
}

// CreateSubscription writes on a POST, which may.
func (s *Server) CreateSubscription(ctx context.Context, request webapi.RequestObject) (webapi.ResponseObject, error) { // want CreateSubscription:"changes state"
	_, err := s.Pool.Exec(ctx, "INSERT INTO subscribers (email) VALUES ($1)", request.Email)
	return nil, err
}

// Plain serves only the operations idemgen's glue hands to PlainHandlers
// (the others run as phases): it implements PlainHandlers, not
// StrictServerInterface.
type Plain struct{ Pool *pgxpool.Pool }

var _ webapi.PlainHandlers = (*Plain)(nil)

func (p *Plain) Unsubscribe(ctx context.Context, request webapi.RequestObject) (webapi.ResponseObject, error) { // want Unsubscribe:"changes state"
	var email string
	err := p.Pool.QueryRow(ctx, "DELETE FROM subscribers WHERE token = $1 RETURNING email", request.Token).Scan(&email) // want `^Plain.Unsubscribe \(GET /unsubscribe\): safe-method: p.Pool.QueryRow writes to the database, but a GET request`
	return nil, err
}

func (p *Plain) GetSubscription(ctx context.Context, request webapi.RequestObject) (webapi.ResponseObject, error) {
	var email string
	err := p.Pool.QueryRow(ctx, "SELECT email FROM subscribers WHERE token = $1", request.Token).Scan(&email)
	return nil, err
}

// Routes is the service's own interface: its comments name routes, but it
// is not generated, so they are not taken for the operations'.
type Routes interface {
	// (GET /purge)
	Purge(ctx context.Context) error
}

type Purger struct{ Pool *pgxpool.Pool }

var _ Routes = (*Purger)(nil)

func (p *Purger) Purge(ctx context.Context) error { // want Purge:"changes state"
	_, err := p.Pool.Exec(ctx, "DELETE FROM subscribers")
	return err
}
