package chaos

import (
	"net/http"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemgen/idemgen/examples/payments/internal/payer"
	"github.com/idemgen/idemgen/examples/payments/payclient"
	"github.com/idemgen/idemgen/runtime/idemclient"
)

// The clients pay through the generated client (payclient), as a caller of
// the payments service would. Its policy retries until a terminal answer:
// the round's deadline, not a number of attempts, ends an intent.
const (
	maxAttempts    = 1000
	attemptTimeout = 8 * time.Second
)

// client returns the payments client of one call. A retryable client sends
// through go-retryablehttp, with idemclient's CheckRetry/Backoff pair
// deciding its retries; the others retry with idemclient's own loop.
// Either counts every attempt in the run's figures.
func (r *run) client(retryable bool) *payclient.IdempotentClient {
	url := "http://" + r.front.addr
	p := idemclient.Policy{MaxAttempts: maxAttempts, MinWait: 100 * time.Millisecond, MaxWait: 2 * time.Second, OnAttempt: r.countAttempt}
	if retryable && !r.cfg.UnsafeClientKeys {
		rc := retryablehttp.NewClient()
		rc.Logger = nil
		rc.RetryMax = maxAttempts
		rc.RetryWaitMin, rc.RetryWaitMax = p.MinWait, p.MaxWait
		rc.HTTPClient.Timeout = attemptTimeout
		rc.CheckRetry, rc.Backoff, rc.PrepareRetry = p.CheckRetry, p.Backoff, p.PrepareRetry
		rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
		c, err := payclient.NewClientWithResponses(url, payclient.WithHTTPClient(rc.StandardClient()))
		if err != nil {
			panic(err) // only a malformed URL fails, and this one is ours
		}
		return &payclient.IdempotentClient{Client: c}
	}
	var transport http.RoundTripper = http.DefaultTransport
	if r.cfg.UnsafeClientKeys {
		transport = freshKeys{next: transport}
	}
	return payer.New(url, p, &http.Client{Timeout: attemptTimeout, Transport: transport})
}

// countAttempt adds one attempt to the run's figures.
func (r *run) countAttempt(a idemclient.Attempt) {
	r.attempts.Add(1)
	switch {
	case a.Err != nil:
		r.resets.Add(1)
	case a.Status == http.StatusConflict:
		r.conflicts.Add(1)
	case a.Status >= 500:
		r.errs5xx.Add(1)
	}
}

// freshKeys is the broken client of the control run: it replaces the
// intent's key with a new one on every attempt, so a retry after a dropped
// response, and the verification call, execute the payment again.
type freshKeys struct{ next http.RoundTripper }

func (f freshKeys) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(idemclient.DefaultHeader, idemclient.NewKey())
	return f.next.RoundTrip(req)
}
