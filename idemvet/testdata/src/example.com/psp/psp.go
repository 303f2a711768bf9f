// Package psp is a payment provider's SDK in stripe-go's style: a call's
// parameters are a struct of pointers, its idempotency key among them.
package psp

import (
	"context"
	"net/http"
)

type ChargeParams struct {
	IdempotencyKey *string
	Amount         *int64
	Customer       *string
}

type Charge struct{ ID string }

func String(s string) *string { return &s }

func Int64(v int64) *int64 { return &v }

type Client struct{ HTTP *http.Client }

func (c *Client) Create(ctx context.Context, params *ChargeParams) (*Charge, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", "https://psp.example/charges", nil)
	if err != nil {
		return nil, err
	}
	if params.IdempotencyKey != nil {
		req.Header.Set("Idempotency-Key", *params.IdempotencyKey)
	}
	res, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	return &Charge{ID: res.Header.Get("Charge-Id")}, nil
}
