// Package cardnet is a card network's client: its Charge sends HTTP, so
// the facts of this package say it reaches the network.
package cardnet

import (
	"context"
	"net/http"
)

type Request struct {
	Amount   int64
	Customer string
}

type Charge struct{ ID string }

type Client struct {
	HTTP *http.Client
	URL  string
}

func (c *Client) Charge(ctx context.Context, key string, req Request) (Charge, error) {
	r, err := http.NewRequestWithContext(ctx, "POST", c.URL, nil)
	if err != nil {
		return Charge{}, err
	}
	r.Header.Set("Idempotency-Key", key)
	return c.send(r)
}

func (c *Client) send(r *http.Request) (Charge, error) {
	res, err := c.HTTP.Do(r)
	if err != nil {
		return Charge{}, err
	}
	defer res.Body.Close()
	return Charge{ID: res.Header.Get("Charge-Id")}, nil
}

// ChargeAll charges several amounts under one key.
func (c *Client) ChargeAll(ctx context.Context, key string, reqs []*Request) (Charge, error) {
	return c.Charge(ctx, key, *reqs[0])
}

// Quote computes locally: calling it from a local phase is fine.
func (c *Client) Quote(req Request) int64 { return req.Amount * 2 }
