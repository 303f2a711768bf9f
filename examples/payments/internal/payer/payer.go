// Package payer is the caller of the payments service that the demo and
// the chaos round both play: the generated client (payclient) with a retry
// policy, the account as bearer token, and payment bodies stamped with the
// client's time. One place, so that both exercise the service the same way.
package payer

import (
	"context"
	"net/http"
	"time"

	"github.com/idemgen/idemgen/examples/payments/payclient"
	"github.com/idemgen/idemgen/runtime/idemclient"
)

// New returns the generated idempotent client of the payments service at
// url: every call retries as p says, each attempt sent through hc. opts
// add to it, such as WithRequestEditorFn(Bearer(account)).
func New(url string, p idemclient.Policy, hc *http.Client, opts ...payclient.ClientOption) *payclient.IdempotentClient {
	c, err := payclient.NewIdempotentClient(url, p, append([]payclient.ClientOption{payclient.WithHTTPClient(hc)}, opts...)...)
	if err != nil {
		panic(err) // only a malformed URL fails, and the callers build theirs
	}
	return c
}

// Bearer is a request editor that pays as account: the service takes the
// account from "Authorization: Bearer <account>".
func Bearer(account string) payclient.RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+account)
		return nil
	}
}

// Payment is the body of a payment of amount EUR cents for customer, for
// the order reference ("" for none), stamped with the client's time
// (client_ts, which the spec excludes from the fingerprint, so a retry
// with a new stamp is still the same request).
func Payment(amount int64, customer, reference string) payclient.NewPayment {
	ts := time.Now().Format(time.RFC3339Nano)
	p := payclient.NewPayment{Amount: amount, Currency: "EUR", Customer: customer, ClientTs: &ts}
	if reference != "" {
		p.Reference = &reference
	}
	return p
}
