package cardnet

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
)

func TestIdempotentCharges(t *testing.T) {
	n := New(Options{})
	srv := httptest.NewServer(n)
	defer srv.Close()
	c := &Client{URL: srv.URL}
	ctx := context.Background()
	req := Request{Amount: 100, Currency: "EUR", Customer: "a@example.com"}
	a, err := c.Charge(ctx, "k1", req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Charge(ctx, "k1", req)
	if err != nil || b != a {
		t.Fatalf("same key: %+v, %v; want %+v", b, err, a)
	}
	if _, err := c.Charge(ctx, "k1", Request{Amount: 200, Currency: "EUR"}); err == nil {
		t.Fatal("same key, other charge: accepted")
	}
	if _, err := c.Charge(ctx, "k2", Request{Amount: DeclinedAmount, Currency: "EUR"}); !errors.Is(err, ErrDeclined) {
		t.Fatalf("declined amount: %v", err)
	}
	n.SetOptions(Options{FailAfter: 1})
	if _, err := c.Charge(ctx, "k3", req); err == nil {
		t.Fatal("FailAfter=1 answered success")
	}
	n.SetOptions(Options{})
	if _, err := c.Charge(ctx, "k3", req); err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, ch := range n.Charges() {
		if ch.Status == "succeeded" {
			ok++
		}
	}
	if ok != 2 || n.Posts() != 6 {
		t.Fatalf("%d charges, %d posts; want 2 and 6", ok, n.Posts())
	}
}
