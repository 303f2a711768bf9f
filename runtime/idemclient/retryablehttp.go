package idemclient

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// The methods below plug the policy into github.com/hashicorp/go-retryablehttp
// without this package depending on it:
//
//	rc := retryablehttp.NewClient()
//	rc.CheckRetry, rc.Backoff, rc.PrepareRetry = p.CheckRetry, p.Backoff, p.PrepareRetry
//	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler // the last answer, not an error, when retries run out
//
// go-retryablehttp buffers request bodies, so every request is replayable;
// its RetryMax bounds the attempts (Policy.MaxAttempts is not used) and its
// RetryWaitMin and RetryWaitMax bound the backoff.

// CheckRetry is a go-retryablehttp CheckRetry: it reports whether the answer
// (a response or an error) is retried under the policy's rules, and stops
// when ctx is done or when the server's Retry-After would end after ctx's
// deadline. It records the attempt in ctx's Tracker, if any, and calls
// OnAttempt (whose Wait is then an estimate: Backoff draws the actual one).
func (p Policy) CheckRetry(ctx context.Context, res *http.Response, err error) (bool, error) {
	p = p.withDefaults()
	var req *http.Request
	if res != nil {
		req = res.Request
	}
	v := p.judge(ctx, req, res, err, 0)
	tr, _ := ctx.Value(trackerKey{}).(*Tracker)
	key := ""
	if req != nil {
		key = p.key(req)
	}
	n := 0
	if tr != nil {
		n = tr.Result().Attempts + 1
	}
	tr.record(key, res, err, v.retry, v.wait)
	if p.OnAttempt != nil {
		a := Attempt{Request: req, N: n, Err: err, Retry: v.retry, Reason: v.reason}
		if res != nil {
			a.Status, a.Header = res.StatusCode, res.Header
		}
		if v.retry {
			a.Wait = v.wait
		}
		p.OnAttempt(a)
	}
	if ctx.Err() != nil {
		return false, context.Cause(ctx)
	}
	return v.retry, nil
}

// Backoff is a go-retryablehttp Backoff: the server's Retry-After (seconds
// or HTTP-date) when the answer has one, else exponential backoff from min
// to max (the client's RetryWaitMin and RetryWaitMax), with jitter.
func (p Policy) Backoff(min, max time.Duration, attemptNum int, res *http.Response) time.Duration {
	p.MinWait, p.MaxWait = min, max
	p = p.withDefaults()
	var v verdict
	if res != nil {
		v.wait, v.hinted = retryAfter(res.Header)
	}
	if !v.hinted {
		v.wait = p.backoff(attemptNum + 1)
	}
	return p.jittered(v)
}

// PrepareRetry is a go-retryablehttp PrepareRetry: it refuses to retry a
// request that carries no key and whose method is not idempotent, since its
// first attempt may have taken effect (CheckRetry cannot see the request
// when the answer was a connection error).
func (p Policy) PrepareRetry(req *http.Request) error {
	p = p.withDefaults()
	if p.key(req) == "" && !idempotentMethod(req.Method) {
		return fmt.Errorf("idemclient: %s %s has no %s: not retried, the first attempt may have taken effect",
			req.Method, req.URL.Redacted(), p.Header)
	}
	return nil
}
