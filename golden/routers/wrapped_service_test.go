package routers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	wrapped "github.com/idemgen/idemgen/golden/wrapped_handler/out"
	"github.com/idemgen/idemgen/runtime/idem"
)

// This file is golden/wrapped_handler's service as an existing one is
// written: chi, a pgx pool, sqlc-style queries, a card network over HTTP.
// Its handlers were adopted with x-idempotency handler: true; what changed
// in each is marked "idemgen:". The create-payment handler as it was is
// testdata/create_payment_before.go.txt.

const wrappedSchema = `
CREATE TABLE stock (item text PRIMARY KEY, n int NOT NULL);
CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL, quantity int NOT NULL, status text NOT NULL DEFAULT 'new');
CREATE TABLE payments (order_id bigint PRIMARY KEY REFERENCES orders (id), charge text NOT NULL, amount bigint NOT NULL);
INSERT INTO stock VALUES ('lamp', 3);`

// DBTX and Queries are what sqlc generates.
type DBTX interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

type Queries struct{ db DBTX }

func NewQueries(db DBTX) *Queries { return &Queries{db: db} }

func (q *Queries) WithTx(tx pgx.Tx) *Queries { return &Queries{db: tx} }

type Order struct {
	ID       int64
	Item     string
	Quantity int64
	Status   string
}

func (q *Queries) TakeStock(ctx context.Context, item string, n int) (int, error) {
	var left int
	err := q.db.QueryRow(ctx, `UPDATE stock SET n = n - $2 WHERE item = $1 AND n >= $2 RETURNING n`, item, n).Scan(&left)
	return left, err
}

func (q *Queries) InsertOrder(ctx context.Context, item string, n int) (Order, error) {
	o := Order{Item: item, Quantity: int64(n), Status: "new"}
	err := q.db.QueryRow(ctx, `INSERT INTO orders (item, quantity) VALUES ($1, $2) RETURNING id`, item, n).Scan(&o.ID)
	return o, err
}

func (q *Queries) GetOrder(ctx context.Context, id int64) (Order, error) {
	var o Order
	err := q.db.QueryRow(ctx, `SELECT id, item, quantity, status FROM orders WHERE id = $1`, id).Scan(&o.ID, &o.Item, &o.Quantity, &o.Status)
	return o, err
}

func (q *Queries) GetOrderForUpdate(ctx context.Context, id int64) (Order, error) {
	var o Order
	err := q.db.QueryRow(ctx, `SELECT id, item, quantity, status FROM orders WHERE id = $1 FOR UPDATE`, id).Scan(&o.ID, &o.Item, &o.Quantity, &o.Status)
	return o, err
}

func (q *Queries) SetOrderStatus(ctx context.Context, id int64, status string) error {
	_, err := q.db.Exec(ctx, `UPDATE orders SET status = $2 WHERE id = $1`, id, status)
	return err
}

func (q *Queries) InsertPayment(ctx context.Context, orderID int64, charge string, amount int64) error {
	_, err := q.db.Exec(ctx, `INSERT INTO payments (order_id, charge, amount) VALUES ($1, $2, $3)`, orderID, charge, amount)
	return err
}

// cardClient calls the card network over HTTP; key is its Idempotency-Key
// ("" sends none, as the service did before).
type cardClient struct {
	url string
	// afterCharge, when set, runs when the network answered: a test's
	// crash between the call and what the handler does next.
	afterCharge func()
}

func (c *cardClient) Charge(ctx context.Context, key, card string, amount int64) (string, error) {
	body, _ := json.Marshal(map[string]any{"card": card, "amount": amount})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// cardNetwork is a fake card network: one charge per Idempotency-Key, a
// new one for every request without.
type cardNetwork struct {
	mu      sync.Mutex
	byKey   map[string]string
	charges int
	calls   int
}

func (n *cardNetwork) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls++
	key := r.Header.Get("Idempotency-Key")
	id, ok := n.byKey[key]
	if !ok || key == "" {
		n.charges++
		id = fmt.Sprintf("ch_%d", n.charges)
		if key != "" {
			n.byKey[key] = id
		}
	}
	json.NewEncoder(w).Encode(map[string]string{"id": id})
}

func (n *cardNetwork) counts() (charges, calls int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.charges, n.calls
}

type orderService struct {
	pool  *pgxpool.Pool
	q     *Queries
	cards *cardClient
}

// CreateOrder is all local: it takes the stock and records the order in
// one transaction, or answers 409.
func (s *orderService) CreateOrder(ctx context.Context, request wrapped.CreateOrderRequestObject) (wrapped.CreateOrderResponseObject, error) {
	tx, err := idem.Begin(ctx, s.pool) // idemgen: was s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	if _, err := q.TakeStock(ctx, request.Body.Item, request.Body.Quantity); errors.Is(err, pgx.ErrNoRows) {
		return wrapped.CreateOrder409JSONResponse{Title: "out of stock: " + request.Body.Item}, nil
	} else if err != nil {
		return nil, err
	}
	order, err := q.InsertOrder(ctx, request.Body.Item, request.Body.Quantity)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return wrapped.CreateOrder201JSONResponse{Id: order.ID, Item: order.Item, Quantity: int(order.Quantity), Status: order.Status}, nil
}

func (s *orderService) GetOrder(ctx context.Context, request wrapped.GetOrderRequestObject) (wrapped.GetOrderResponseObject, error) {
	order, err := s.q.GetOrder(ctx, request.Id)
	if errors.Is(err, pgx.ErrNoRows) {
		return wrapped.GetOrder404Response{}, nil
	}
	if err != nil {
		return nil, err
	}
	return wrapped.GetOrder200JSONResponse{Id: order.ID, Item: order.Item, Quantity: int(order.Quantity), Status: order.Status}, nil
}

// CreatePayment marks the order paying, charges the card, and records the
// payment: testdata/create_payment_before.go.txt with its first
// transaction in a local step, the card call in a foreign one, and its last
// transaction begun with idem.Begin.
func (s *orderService) CreatePayment(ctx context.Context, request wrapped.CreatePaymentRequestObject) (wrapped.CreatePaymentResponseObject, error) {
	order, err := idem.Local(ctx, s.pool, "reserve", func(ctx context.Context, tx pgx.Tx) (Order, error) { // idemgen
		q := s.q.WithTx(tx)
		order, err := q.GetOrderForUpdate(ctx, request.Id)
		if err == nil && order.Status == "new" { // idemgen
			err = q.SetOrderStatus(ctx, order.ID, "paying") // idemgen
		} // idemgen
		return order, err // idemgen
	}) // idemgen
	if errors.Is(err, pgx.ErrNoRows) {
		return wrapped.CreatePayment404JSONResponse{Title: "no such order"}, nil
	}
	if err != nil {
		return nil, err
	}
	if order.Status != "new" {
		return wrapped.CreatePayment409JSONResponse{Title: "the order is " + order.Status}, nil
	}
	amount := order.Quantity * 250
	charge, err := idem.Foreign(ctx, "charge", func(ctx context.Context, key string) (string, error) { // idemgen
		return s.cards.Charge(ctx, key, request.Body.Card, amount) // idemgen
	}) // idemgen
	if err != nil {
		return nil, err
	}
	if s.cards.afterCharge != nil {
		s.cards.afterCharge()
	}
	tx, err := idem.Begin(ctx, s.pool) // idemgen
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	q := s.q.WithTx(tx)
	if err := q.InsertPayment(ctx, order.ID, charge, amount); err != nil {
		return nil, err
	}
	if err := q.SetOrderStatus(ctx, order.ID, "paid"); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return wrapped.CreatePayment201JSONResponse{OrderId: order.ID, Charge: charge, Amount: amount}, nil
}
