package idemclient_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemgen/idemgen/runtime/idemclient"
)

// A server that fails once, then executes.
func flakyServer() *httptest.Server {
	var n atomic.Int32
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
}

// The key is minted when the intent is born and stored with it (see
// docs/client.md); every attempt of every call for this intent sends it.
func ExampleTransport() {
	srv := flakyServer()
	defer srv.Close()
	key := idemclient.NewKey() // store it with the intent before the first call

	client := &http.Client{Transport: &idemclient.Transport{Policy: idemclient.Policy{MinWait: 10 * time.Millisecond}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // bounds every attempt and wait
	defer cancel()
	ctx, tracker := idemclient.Track(ctx)
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/payments", strings.NewReader(`{"amount":1000}`))
	req.Header.Set("Idempotency-Key", key)
	res, err := client.Do(req)
	if err != nil {
		fmt.Println("no answer yet; retry later with the same key:", err)
		return
	}
	res.Body.Close()
	r := tracker.Result()
	fmt.Println(res.StatusCode, "after", r.Attempts, "attempts, same key:", r.Key == key, "replayed:", r.Replayed)
	// Output: 201 after 2 attempts, same key: true replayed: false
}

func ExamplePolicy_CheckRetry() {
	srv := flakyServer()
	defer srv.Close()
	var p idemclient.Policy
	rc := retryablehttp.NewClient()
	rc.Logger = nil
	rc.RetryWaitMin = 10 * time.Millisecond
	rc.CheckRetry, rc.Backoff, rc.PrepareRetry = p.CheckRetry, p.Backoff, p.PrepareRetry
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler // the last answer when retries run out

	req, _ := retryablehttp.NewRequest("POST", srv.URL+"/payments", []byte(`{"amount":1000}`))
	req.Header.Set("Idempotency-Key", idemclient.NewKey())
	res, err := rc.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	res.Body.Close()
	fmt.Println(res.StatusCode)
	// Output: 201
}
