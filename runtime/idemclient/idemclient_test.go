package idemclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// reply is one scripted answer. drop closes the connection instead of
// answering, after reading the request.
type reply struct {
	status int
	header map[string]string
	body   string
	drop   bool
}

// seen is one request the server received.
type seen struct {
	at   time.Time
	key  string
	body string
	age  string // Idempotency-Intent-Age
}

// script serves its replies in order, then repeats the last one.
type script struct {
	mu      sync.Mutex
	replies []reply
	seen    []seen
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.seen = append(s.seen, seen{at: time.Now(), key: r.Header.Get("Idempotency-Key"), body: string(b), age: r.Header.Get(idemclient.IntentAgeHeader)})
	rep := s.replies[min(len(s.seen), len(s.replies))-1]
	s.mu.Unlock()
	if rep.drop {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	io.WriteString(w, rep.body)
}

func (s *script) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.seen...)
}

// fast is a policy with short waits for tests.
var fast = idemclient.Policy{MinWait: 10 * time.Millisecond, MaxWait: 40 * time.Millisecond}

func serve(t *testing.T, replies ...reply) (*script, string) {
	t.Helper()
	s := &script{replies: replies}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// post sends a keyed POST through a Transport with p and returns the status
// (0 on error), the body, the call's Result and the error.
func post(t *testing.T, ctx context.Context, p idemclient.Policy, url, key, body string) (int, string, idemclient.Result, error) {
	t.Helper()
	call := idemclient.NewCall(ctx, "", key)
	req, err := http.NewRequestWithContext(call.Context(), "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	call.SetKey(nil, req)
	c := &http.Client{Transport: &idemclient.Transport{Policy: p}}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", call.Result(), err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), call.Result(), nil
}

func TestOneKeyPerIntentAndTheSameBody(t *testing.T) {
	s, url := serve(t, reply{drop: true}, reply{status: 503}, reply{status: 500}, reply{status: 201, body: "made"})
	status, body, res, err := post(t, context.Background(), fast, url, "", `{"amount":1}`)
	if err != nil || status != 201 || body != "made" {
		t.Fatalf("got %d %q %v", status, body, err)
	}
	reqs := s.requests()
	if len(reqs) != 4 || res.Attempts != 4 {
		t.Fatalf("%d requests, %d attempts reported; want 4", len(reqs), res.Attempts)
	}
	if _, err := uuid.Parse(res.Key); err != nil || len(res.Key) != 36 {
		t.Fatalf("minted key %q is not a UUID: %v", res.Key, err)
	}
	for i, r := range reqs {
		if r.key != res.Key || r.body != `{"amount":1}` {
			t.Errorf("attempt %d sent key %q body %q; want %q and the same body", i+1, r.key, r.body, res.Key)
		}
	}
	if res.Replayed {
		t.Error("a fresh answer reported as replayed")
	}
}

func TestNewKeyIsUUIDv7(t *testing.T) {
	seenKeys := map[string]bool{}
	for range 1000 {
		k := idemclient.NewKey()
		u, err := uuid.Parse(k)
		if err != nil || u.Version() != 7 || seenKeys[k] {
			t.Fatalf("key %q: version %v, err %v, repeated %t", k, u.Version(), err, seenKeys[k])
		}
		seenKeys[k] = true
	}
}

func TestAnswersAreNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name string
		rep  reply
	}{
		{"422 key reused", reply{status: 422, body: "key-reused"}},
		{"402 business answer", reply{status: 402, body: "declined"}},
		{"400 bad key", reply{status: 400}},
		{"409 business conflict without Retry-After", reply{status: 409}},
		{"replayed 500 stored answer", reply{status: 500, header: map[string]string{"Idempotent-Replayed": "true"}}},
		{"replayed 409 stored answer", reply{status: 409, header: map[string]string{"Idempotent-Replayed": "true", "Retry-After": "1"}}},
		{"501 not implemented", reply{status: 501}},
		{"201", reply{status: 201}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, url := serve(t, tc.rep, reply{status: 299})
			start := time.Now()
			status, _, res, err := post(t, context.Background(), fast, url, "k1", "{}")
			if err != nil || status != tc.rep.status {
				t.Fatalf("got %d, %v; want %d", status, err, tc.rep.status)
			}
			if n := len(s.requests()); n != 1 || res.Attempts != 1 {
				t.Fatalf("%d requests, %d attempts; want 1", n, res.Attempts)
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Errorf("returned after %v; want at once", d)
			}
			if want := tc.rep.header["Idempotent-Replayed"] == "true"; res.Replayed != want {
				t.Errorf("Replayed %t; want %t", res.Replayed, want)
			}
		})
	}
}

func TestServerErrorsAreRetried(t *testing.T) {
	for _, status := range []int{500, 502, 503, 504, 429} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			s, url := serve(t, reply{status: status}, reply{status: 201})
			got, _, res, err := post(t, context.Background(), fast, url, "k1", "{}")
			if err != nil || got != 201 || len(s.requests()) != 2 || res.Attempts != 2 {
				t.Fatalf("got %d %v after %d requests; want 201 after 2", got, err, len(s.requests()))
			}
		})
	}
}

func TestInFlightWaitsRetryAfterAndEndsInTheReplay(t *testing.T) {
	t.Parallel()
	s, url := serve(t,
		reply{status: 409, header: map[string]string{"Retry-After": "1"}},
		reply{status: 201, body: "stored", header: map[string]string{"Idempotent-Replayed": "true"}})
	var attempts []idemclient.Attempt
	p := fast
	p.OnAttempt = func(a idemclient.Attempt) { attempts = append(attempts, a) }
	status, body, res, err := post(t, context.Background(), p, url, "k1", "{}")
	if err != nil || status != 201 || body != "stored" || !res.Replayed || res.Attempts != 2 {
		t.Fatalf("got %d %q %+v %v", status, body, res, err)
	}
	reqs := s.requests()
	if gap := reqs[1].at.Sub(reqs[0].at); gap < time.Second {
		t.Errorf("retried after %v; Retry-After said 1s", gap)
	}
	if len(attempts) != 2 || !attempts[0].Retry || attempts[0].Status != 409 || attempts[0].Wait < time.Second || attempts[1].Retry {
		t.Errorf("attempts reported: %+v", attempts)
	}
	if !strings.Contains(attempts[0].Reason, "in flight") {
		t.Errorf("reason %q", attempts[0].Reason)
	}
}

func TestRetryAfterHTTPDate(t *testing.T) {
	t.Parallel()
	// An HTTP-date has whole seconds: two seconds ahead is at least one.
	date := time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat)
	s, url := serve(t, reply{status: 503, header: map[string]string{"Retry-After": date}}, reply{status: 201})
	status, _, _, err := post(t, context.Background(), fast, url, "k1", "{}")
	if err != nil || status != 201 {
		t.Fatalf("got %d %v", status, err)
	}
	reqs := s.requests()
	if gap := reqs[1].at.Sub(reqs[0].at); gap < time.Second || gap > 4*time.Second {
		t.Errorf("retried after %v; Retry-After was %s", gap, date)
	}
	// A date in the past means now.
	s, url = serve(t, reply{status: 503, header: map[string]string{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}}, reply{status: 201})
	start := time.Now()
	if status, _, _, err := post(t, context.Background(), fast, url, "k1", "{}"); err != nil || status != 201 || len(s.requests()) != 2 {
		t.Fatalf("got %d %v", status, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a past date made the client wait %v", d)
	}
}

func TestRetryAfterLongerThanMaxIsReturned(t *testing.T) {
	s, url := serve(t, reply{status: 409, header: map[string]string{"Retry-After": "120"}})
	status, _, res, err := post(t, context.Background(), fast, url, "k1", "{}")
	if err != nil || status != 409 || len(s.requests()) != 1 || res.Attempts != 1 {
		t.Fatalf("got %d %v after %d requests; want the 409 at once", status, err, len(s.requests()))
	}
}

func TestContextDeadlineCapsTheWaits(t *testing.T) {
	// Retry-After beyond the deadline: the answer comes back at once.
	s, url := serve(t, reply{status: 409, header: map[string]string{"Retry-After": "5"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	status, _, _, err := post(t, ctx, fast, url, "k1", "{}")
	if err != nil || status != 409 || len(s.requests()) != 1 || time.Since(start) > time.Second {
		t.Fatalf("got %d %v after %d requests in %v", status, err, len(s.requests()), time.Since(start))
	}
	// Backoff until the deadline: the last answer comes back before it (or
	// the deadline's error, when it fell during the last attempt).
	p := idemclient.Policy{MinWait: 50 * time.Millisecond, MaxWait: 50 * time.Millisecond, MaxAttempts: 1000}
	s, url = serve(t, reply{status: 503})
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start = time.Now()
	status, _, res, err := post(t, ctx, p, url, "k1", "{}")
	if status != 503 && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %d %v; want the last 503", status, err)
	}
	if d := time.Since(start); d > 600*time.Millisecond || res.Attempts < 5 {
		t.Errorf("%d attempts in %v; want several, within the deadline", res.Attempts, d)
	}
	// Cancelled while waiting: the context's error.
	s, url = serve(t, reply{status: 409, header: map[string]string{"Retry-After": "3"}})
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	if _, _, _, err := post(t, ctx, fast, url, "k1", "{}"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled during the wait: %v", err)
	}
	_ = s
}

func TestMaxAttempts(t *testing.T) {
	s, url := serve(t, reply{status: 503})
	p := fast
	p.MaxAttempts = 3
	status, _, res, err := post(t, context.Background(), p, url, "k1", "{}")
	if err != nil || status != 503 || len(s.requests()) != 3 || res.Attempts != 3 {
		t.Fatalf("got %d %v after %d requests; want the third 503", status, err, len(s.requests()))
	}
}

func TestBackoffHasJitterAndGrows(t *testing.T) {
	p := idemclient.Policy{}
	seenWaits := map[time.Duration]bool{}
	for range 50 {
		w := p.Backoff(100*time.Millisecond, 2*time.Second, 0, nil)
		if w < 50*time.Millisecond || w > 100*time.Millisecond {
			t.Fatalf("first backoff %v outside [50ms, 100ms]", w)
		}
		seenWaits[w] = true
		if w := p.Backoff(100*time.Millisecond, 2*time.Second, 10, nil); w < time.Second || w > 2*time.Second {
			t.Fatalf("late backoff %v outside [1s, 2s]", w)
		}
	}
	if len(seenWaits) < 10 {
		t.Errorf("only %d distinct waits in 50: no jitter", len(seenWaits))
	}
	res := &http.Response{Header: http.Header{"Retry-After": {"3"}}}
	for range 50 {
		if w := p.Backoff(100*time.Millisecond, time.Second, 0, res); w < 3*time.Second || w > 3300*time.Millisecond {
			t.Fatalf("Retry-After 3 gave %v; want 3s plus at most a tenth", w)
		}
	}
}

func TestUnreplayableBodyIsNotRetried(t *testing.T) {
	s, url := serve(t, reply{status: 503}, reply{status: 201})
	var reason string
	p := fast
	p.OnAttempt = func(a idemclient.Attempt) { reason = a.Reason }
	req, _ := http.NewRequest("POST", url, io.NopCloser(strings.NewReader("{}")))
	req.Header.Set("Idempotency-Key", "k1")
	if req.GetBody != nil {
		t.Fatal("the test needs a request without GetBody")
	}
	res, err := (&http.Client{Transport: &idemclient.Transport{Policy: p}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 503 || len(s.requests()) != 1 || !strings.Contains(reason, "cannot be replayed") {
		t.Fatalf("got %d after %d requests (%s); want the 503 at once", res.StatusCode, len(s.requests()), reason)
	}
}

func TestWithoutKeyOnlyIdempotentMethodsAreRetried(t *testing.T) {
	s, url := serve(t, reply{status: 503}, reply{status: 201})
	c := &http.Client{Transport: &idemclient.Transport{Policy: fast}}
	res, err := c.Post(url, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 503 || len(s.requests()) != 1 {
		t.Fatalf("a POST without a key: %d after %d requests; want the 503, not retried", res.StatusCode, len(s.requests()))
	}
	s, url = serve(t, reply{drop: true}, reply{status: 200})
	res, err = c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || len(s.requests()) != 2 {
		t.Fatalf("a GET: %d after %d requests; want 200 after 2", res.StatusCode, len(s.requests()))
	}
}

// restartingServer listens on addr after delay, and answers 201.
func restartingServer(t *testing.T, addr string, delay time.Duration) *script {
	t.Helper()
	s := &script{replies: []reply{{status: 201}}}
	srv := &http.Server{Handler: s}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(delay)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen again on %s: %v", addr, err)
			return
		}
		srv.Serve(ln)
	}()
	t.Cleanup(func() { srv.Close(); <-done })
	return s
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestConnectionRefusedIsRetried(t *testing.T) {
	addr := freeAddr(t)
	s := restartingServer(t, addr, 300*time.Millisecond)
	var errs int
	p := idemclient.Policy{MinWait: 50 * time.Millisecond, MaxWait: 100 * time.Millisecond, MaxAttempts: 50,
		OnAttempt: func(a idemclient.Attempt) {
			if a.Err != nil {
				errs++
			}
		}}
	status, _, res, err := post(t, context.Background(), p, "http://"+addr+"/x", "k1", "{}")
	if err != nil || status != 201 || errs == 0 || res.Attempts != errs+1 || len(s.requests()) != 1 {
		t.Fatalf("got %d %v; %d refused attempts, %+v", status, err, errs, res)
	}
	// Without a key a POST is retried only because nothing reached the server.
	addr = freeAddr(t)
	s = restartingServer(t, addr, 300*time.Millisecond)
	res2, err := (&http.Client{Transport: &idemclient.Transport{Policy: p}}).Post("http://"+addr+"/x", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res2.Body.Close()
	if res2.StatusCode != 201 || len(s.requests()) != 1 {
		t.Fatalf("a refused POST without a key: %d after %d requests", res2.StatusCode, len(s.requests()))
	}
}

func TestPermanentErrorsAreNotRetried(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshake is the point
	srv.StartTLS()
	defer srv.Close()
	var n int
	p := fast
	p.OnAttempt = func(idemclient.Attempt) { n++ }
	// The default transport does not trust the test server's certificate.
	_, _, _, err := post(t, context.Background(), p, srv.URL, "k1", "{}")
	if err == nil || n != 1 {
		t.Fatalf("untrusted certificate: %d attempts, %v; want 1 and an error", n, err)
	}
}

func TestDoerSendsEachAttemptWithTheNextDoer(t *testing.T) {
	s, url := serve(t, reply{drop: true}, reply{status: 201, body: "ok"})
	d := idemclient.NewDoer(&http.Client{Timeout: 5 * time.Second}, fast)
	ctx, tr := idemclient.Track(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader([]byte("{}")))
	req.Header.Set("Idempotency-Key", "intent-7")
	res, err := d.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	got := tr.Result()
	if res.StatusCode != 201 || got.Attempts != 2 || got.Key != "intent-7" || len(s.requests()) != 2 {
		t.Fatalf("got %d, %+v after %d requests", res.StatusCode, got, len(s.requests()))
	}
}

func retryable(p idemclient.Policy) *retryablehttp.Client {
	rc := retryablehttp.NewClient()
	rc.Logger = nil
	rc.RetryWaitMin, rc.RetryWaitMax, rc.RetryMax = 10*time.Millisecond, 40*time.Millisecond, 5
	rc.CheckRetry, rc.Backoff, rc.PrepareRetry = p.CheckRetry, p.Backoff, p.PrepareRetry
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	return rc
}

func TestRetryableHTTP(t *testing.T) {
	t.Parallel()
	send := func(ctx context.Context, rc *retryablehttp.Client, url, key string) (*http.Response, error) {
		req, _ := retryablehttp.NewRequestWithContext(ctx, "POST", url, []byte("{}"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		return rc.Do(req)
	}
	t.Run("409 then replay", func(t *testing.T) {
		t.Parallel()
		s, url := serve(t, reply{drop: true}, reply{status: 409, header: map[string]string{"Retry-After": "1"}},
			reply{status: 201, header: map[string]string{"Idempotent-Replayed": "true"}})
		ctx, tr := idemclient.Track(context.Background())
		res, err := send(ctx, retryable(idemclient.Policy{}), url, "k1")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		got := tr.Result()
		reqs := s.requests()
		if res.StatusCode != 201 || len(reqs) != 3 || !got.Replayed || got.Attempts != 3 || got.Key != "k1" {
			t.Fatalf("got %d after %d requests, %+v", res.StatusCode, len(reqs), got)
		}
		if gap := reqs[2].at.Sub(reqs[1].at); gap < time.Second {
			t.Errorf("retried the 409 after %v; Retry-After said 1s", gap)
		}
	})
	t.Run("422 and 402 are answers", func(t *testing.T) {
		for _, status := range []int{422, 402} {
			s, url := serve(t, reply{status: status}, reply{status: 201})
			res, err := send(context.Background(), retryable(idemclient.Policy{}), url, "k1")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != status || len(s.requests()) != 1 {
				t.Fatalf("%d: got %d after %d requests", status, res.StatusCode, len(s.requests()))
			}
		}
	})
	t.Run("5xx retried until RetryMax, last answer passed through", func(t *testing.T) {
		s, url := serve(t, reply{status: 502})
		res, err := send(context.Background(), retryable(idemclient.Policy{}), url, "k1")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 502 || len(s.requests()) != 6 {
			t.Fatalf("got %d after %d requests; want 502 after 6", res.StatusCode, len(s.requests()))
		}
	})
	t.Run("Retry-After past the deadline", func(t *testing.T) {
		s, url := serve(t, reply{status: 503, header: map[string]string{"Retry-After": "10"}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res, err := send(ctx, retryable(idemclient.Policy{}), url, "k1")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 503 || len(s.requests()) != 1 {
			t.Fatalf("got %d after %d requests; want the 503 at once", res.StatusCode, len(s.requests()))
		}
	})
	t.Run("a POST without a key is not retried after a connection error", func(t *testing.T) {
		s, url := serve(t, reply{drop: true}, reply{status: 201})
		_, err := send(context.Background(), retryable(idemclient.Policy{}), url, "")
		if err == nil || !strings.Contains(err.Error(), "has no Idempotency-Key") || len(s.requests()) != 1 {
			t.Fatalf("%v after %d requests", err, len(s.requests()))
		}
	})
}

func TestACallsOwnKeyHeaderMakesItRetryable(t *testing.T) {
	s, url := serve(t, reply{status: 503}, reply{status: 201})
	call := idemclient.NewCall(context.Background(), "X-Request-Id", "")
	req, _ := http.NewRequestWithContext(call.Context(), "POST", url, strings.NewReader("{}"))
	call.SetKey(nil, req)
	res, err := (&http.Client{Transport: &idemclient.Transport{Policy: fast}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	got := call.Result()
	if res.StatusCode != 201 || got.Attempts != 2 || len(s.requests()) != 2 || got.Key == "" {
		t.Fatalf("a POST keyed in X-Request-Id: %d after %d requests, %+v; want 201 after 2", res.StatusCode, len(s.requests()), got)
	}
}

// TestABodyKeyedCallIsRetried: a POST whose key is in its body (a webhook's
// event id) is retried like a keyed one, sends no key header, and reports
// the key it read; a body without the key is sent unkeyed, and not retried.
func TestABodyKeyedCallIsRetried(t *testing.T) {
	send := func(url, body string) (*http.Response, idemclient.Result, error) {
		call := idemclient.NewBodyCall(context.Background(), "/data/id")
		req, _ := http.NewRequestWithContext(call.Context(), "POST", url, strings.NewReader(body))
		if err := call.SetKey(nil, req); err != nil {
			t.Fatal(err)
		}
		res, err := (&http.Client{Transport: &idemclient.Transport{Policy: fast}}).Do(req)
		if err == nil {
			res.Body.Close()
		}
		return res, call.Result(), err
	}
	s, url := serve(t, reply{status: 503}, reply{drop: true}, reply{status: 200})
	res, got, err := send(url, `{"type":"charge.succeeded","data":{"id":"evt_9"}}`)
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.requests()
	if res.StatusCode != 200 || got.Attempts != 3 || got.Key != "evt_9" || len(reqs) != 3 || reqs[0].key != "" || reqs[2].body != reqs[0].body {
		t.Fatalf("a body-keyed POST: %d after %d requests, %+v; want 200 after 3, key evt_9, the same body, no key header", res.StatusCode, len(reqs), got)
	}
	s, url = serve(t, reply{status: 503}, reply{status: 200})
	res, got, err = send(url, `{"type":"charge.succeeded"}`)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 503 || len(s.requests()) != 1 || got.Key != "" {
		t.Fatalf("a POST without its body key: %d after %d requests, %+v; want the 503, not retried", res.StatusCode, len(s.requests()), got)
	}
	s, url = serve(t, reply{status: 503}, reply{status: 200})
	if res, got, err = send(url, `{"data":{"id":42}}`); err != nil || res.StatusCode != 200 || got.Key != "42" {
		t.Fatalf("an integer key: %v, %+v", err, got)
	}
}

// TestSameJSON: what was sent is in what is read back, members the server
// added aside, numbers by value.
func TestSameJSON(t *testing.T) {
	for _, tc := range []struct {
		sent, current string
		want          bool
	}{
		{`{"item":"book","quantity":1}`, `{"id":"o-1","item":"book","quantity":1}`, true},
		{`{"quantity":1}`, `{"quantity":1.0}`, true},
		{`{"quantity":1}`, `{"quantity":2}`, false},
		{`{"item":"book"}`, `{"id":"o-1"}`, false},
		{`{"tags":["a","b"]}`, `{"tags":["a","b"]}`, true},
		{`{"tags":["a"]}`, `{"tags":["a","b"]}`, false},
		{`{"lines":[{"sku":"x"}]}`, `{"lines":[{"sku":"x","n":1}]}`, true},
		{`{"a":null}`, `{"a":null}`, true},
		{`{"a":null}`, `{}`, false},
		{`{"a":1}`, `not json`, false},
		{`{"a":1} {}`, `{"a":1}`, false},
	} {
		if got := idemclient.SameJSON([]byte(tc.sent), []byte(tc.current)); got != tc.want {
			t.Errorf("SameJSON(%s, %s) = %t; want %t", tc.sent, tc.current, got, tc.want)
		}
	}
}

// TestEveryAttemptSaysItsIntentsAge: each keyed attempt carries how long
// ago its intent began (WithIntentStart, for an intent retried after a
// crash), and an unkeyed request carries nothing.
func TestEveryAttemptSaysItsIntentsAge(t *testing.T) {
	s, url := serve(t, reply{status: 503}, reply{status: 201})
	ctx := idemclient.WithIntentStart(context.Background(), time.Now().Add(-90*time.Second))
	if status, _, _, err := post(t, ctx, fast, url, "order-1", "{}"); err != nil || status != 201 {
		t.Fatalf("got %d, %v", status, err)
	}
	for i, r := range s.requests() {
		if r.age != "90" && r.age != "91" {
			t.Errorf("attempt %d said its intent is %q seconds old; want 90", i+1, r.age)
		}
	}
	s, url = serve(t, reply{status: 200})
	res, err := (&http.Client{Transport: &idemclient.Transport{Policy: fast}}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if age := s.requests()[0].age; age != "" {
		t.Errorf("an unkeyed GET said its intent is %q seconds old", age)
	}
}

// v7At is a UUIDv7 minted at t, as NewKey mints them.
func v7At(t time.Time) string {
	var u uuid.UUID
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6], u[8] = 0x70, 0x80 // version 7, RFC 9562 variant
	return u.String()
}

// TestAnIntentPastTheRetentionIsNotSent: a call held to the server's
// retention (as the generated client holds each operation) whose key was
// minted longer ago than the retention, less the margin, fails without
// sending anything, with an error the caller tells apart; a younger one is
// sent.
func TestAnIntentPastTheRetentionIsNotSent(t *testing.T) {
	s, url := serve(t, reply{status: 201})
	send := func(key string) error {
		call := idemclient.NewCall(context.Background(), "", key).WithRetention(time.Hour)
		req, _ := http.NewRequestWithContext(call.Context(), "POST", url, strings.NewReader("{}"))
		call.SetKey(nil, req)
		res, err := (&http.Client{Transport: &idemclient.Transport{Policy: fast}}).Do(req)
		if err == nil {
			res.Body.Close()
		}
		return err
	}
	err := send(v7At(time.Now().Add(-58 * time.Minute)))
	var expired *idemclient.IntentExpiredError
	if !errors.Is(err, idemclient.ErrIntentExpired) || !errors.As(err, &expired) || expired.Horizon != time.Hour || expired.Margin != 6*time.Minute {
		t.Fatalf("a key minted 58 minutes ago, retention 1h: %v; want ErrIntentExpired (margin 6m)", err)
	}
	if n := len(s.requests()); n != 0 {
		t.Fatalf("%d requests sent for an expired intent; want none", n)
	}
	if err := send(v7At(time.Now().Add(-50 * time.Minute))); err != nil {
		t.Fatalf("a key minted 50 minutes ago, retention 1h: %v; want it sent", err)
	}
	if r := s.requests(); len(r) != 1 || r[0].age != "3000" && r[0].age != "3001" {
		t.Fatalf("requests %+v; want one, 3000 seconds old", r)
	}
}

// TestTheHorizonEndsRetries: with Policy.Horizon (any Idempotency-Key
// API), a request retried until its intent nears the horizon stops there,
// instead of retrying into a window where the server may have forgotten
// its key.
func TestTheHorizonEndsRetries(t *testing.T) {
	s, url := serve(t, reply{status: 503})
	p := idemclient.Policy{MinWait: 40 * time.Millisecond, MaxWait: 80 * time.Millisecond, MaxAttempts: 50,
		Horizon: 400 * time.Millisecond, HorizonMargin: 100 * time.Millisecond}
	_, _, res, err := post(t, context.Background(), p, url, "order-2", "{}")
	if !errors.Is(err, idemclient.ErrIntentExpired) {
		t.Fatalf("retried 503s: %v; want ErrIntentExpired", err)
	}
	if n := len(s.requests()); n < 2 || n >= 50 || res.Attempts != n {
		t.Fatalf("%d requests, %d attempts; want a few, ended by the horizon", n, res.Attempts)
	}
}

// TestPreferWait: the editor sends the wait in whole seconds, as the server
// reads it (idemhttp.PreferWait), 0 included, and a negative wait as 0.
func TestPreferWait(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{0, "wait=0"}, {2500 * time.Millisecond, "wait=2"}, {-time.Second, "wait=0"}, {time.Minute, "wait=60"}} {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		if err := idemclient.PreferWait(c.d)(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if got := req.Header.Get("Prefer"); got != c.want {
			t.Errorf("PreferWait(%v): Prefer %q; want %q", c.d, got, c.want)
		}
		if d, ok := idemhttp.PreferWait(req.Header); !ok || d != max(c.d, 0).Truncate(time.Second) {
			t.Errorf("PreferWait(%v): the server reads %v, %t", c.d, d, ok)
		}
	}
}
