package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// orderAnswer is one answer of the orders API: status, ETag, body, and the
// problem's type and detail when it is one.
type orderAnswer struct {
	status  int
	etag    string
	body    string
	problem struct {
		Type   string `json:"type"`
		Detail string `json:"detail"`
	}
}

// call sends method url as account acct_ada with the headers (name, value
// pairs) and body ("" for none).
func call(t *testing.T, method, url, body string, headers ...string) orderAnswer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, r)
	req.Header.Set("Authorization", "Bearer acct_ada")
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return orderAnswer{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a := orderAnswer{status: res.StatusCode, etag: res.Header.Get("ETag"), body: string(b)}
	if res.Header.Get("Content-Type") == "application/problem+json" {
		json.Unmarshal(b, &a.problem)
	}
	return a
}

// newOrder creates order id, and returns the URL of its shipping address.
func newOrder(t *testing.T, s *service, id string) string {
	t.Helper()
	if a := call(t, "PUT", s.url+"/orders/"+id, `{"item":"book"}`, "If-None-Match", "*"); a.status != 201 {
		t.Fatalf("creating order %s: %d %s", id, a.status, a.body)
	}
	return s.url + "/orders/" + id + "/shipping"
}

func address(a string) string { return fmt.Sprintf(`{"address":%q}`, a) }

// TestShippingRacingClientsOneWins: two clients read the order's shipping
// address and its ETag, and both PUT a new address with that If-Match at
// once, each a goroutine of its own on the real database, round after
// round: one gets 200 and the other 412, and the order holds the 200's
// address under the 200's ETag.
func TestShippingRacingClientsOneWins(t *testing.T) {
	s := newService(t)
	url := newOrder(t, s, "o-race")
	for round := range 10 {
		read := call(t, "GET", url, "")
		if read.status != 200 || read.etag == "" {
			t.Fatalf("round %d: GET %d %s, ETag %q; want 200 with an ETag", round, read.status, read.body, read.etag)
		}
		answers := make([]orderAnswer, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range answers {
			wg.Go(func() {
				<-start
				answers[i] = call(t, "PUT", url, address(fmt.Sprintf("round %d, client %d", round, i)), "If-Match", read.etag)
			})
		}
		close(start)
		wg.Wait()
		statuses := []int{answers[0].status, answers[1].status}
		slices.Sort(statuses)
		if !slices.Equal(statuses, []int{200, 412}) {
			t.Fatalf("round %d: %d %s and %d %s; want one 200 and one 412", round, answers[0].status, answers[0].body, answers[1].status, answers[1].body)
		}
		won, lost := answers[0], answers[1]
		if won.status != 200 {
			won, lost = lost, won
		}
		if lost.problem.Type != "urn:idemgen:problem:precondition-failed" || !strings.Contains(lost.problem.Detail, won.etag) {
			t.Fatalf("round %d: the 412 is %s; want precondition-failed naming the ETag %s", round, lost.body, won.etag)
		}
		if now := call(t, "GET", url, ""); now.body != won.body || now.etag != won.etag || won.etag == read.etag {
			t.Fatalf("round %d: the order holds %s under %s; want the 200's %s under its new ETag %s", round, now.body, now.etag, won.body, won.etag)
		}
	}
}

// TestShippingDelayedRetryCannotEraseANewerWrite: a client changes the
// address with the ETag it read; a second client reads the result and
// changes it again; the first client's delayed retry, with the If-Match it
// was sent with, gets 412 and the order keeps the second address.
func TestShippingDelayedRetryCannotEraseANewerWrite(t *testing.T) {
	s := newService(t)
	url := newOrder(t, s, "o-delayed")
	first := call(t, "GET", url, "")
	put := call(t, "PUT", url, address("12 Oak Street"), "If-Match", first.etag)
	if put.status != 200 || put.etag == first.etag {
		t.Fatalf("the first write: %d %s, ETag %s after %s", put.status, put.body, put.etag, first.etag)
	}
	second := call(t, "GET", url, "")
	if a := call(t, "PUT", url, address("7 Elm Street"), "If-Match", second.etag); a.status != 200 {
		t.Fatalf("the second write: %d %s", a.status, a.body)
	}
	retry := call(t, "PUT", url, address("12 Oak Street"), "If-Match", first.etag)
	if retry.status != 412 {
		t.Fatalf("the first write's delayed retry: %d %s; want 412", retry.status, retry.body)
	}
	if now := call(t, "GET", url, ""); now.body != address("7 Elm Street")+"\n" {
		t.Fatalf("the order holds %s; want the second write's address", now.body)
	}
}

// TestOrderCreatedOnce: PUT /orders/{id} with If-None-Match: * twice: 201,
// then 412, the order as the first PUT made it.
func TestOrderCreatedOnce(t *testing.T) {
	s := newService(t)
	url := s.url + "/orders/o-once"
	for _, want := range []int{201, 412} {
		if a := call(t, "PUT", url, fmt.Sprintf(`{"item":"book %d"}`, want), "If-None-Match", "*"); a.status != want {
			t.Fatalf("PUT: %d %s; want %d", a.status, a.body, want)
		}
	}
	if n := s.count(`SELECT count(*) FROM orders WHERE account = 'acct_ada' AND id = 'o-once' AND item = 'book 201'`); n != 1 {
		t.Fatalf("%d orders as the first PUT made it; want 1", n)
	}
}

// TestPreconditionsRefused: a conditional write without the precondition
// its spec requires is 428, a malformed If-Match (no quotes, a weak ETag)
// is 400, a write of an order that does not exist 404, each a problem
// whose detail says what to do, and none changes the order.
func TestPreconditionsRefused(t *testing.T) {
	s := newService(t)
	url := newOrder(t, s, "o-refused")
	etag := call(t, "GET", url, "").etag
	for _, c := range []struct {
		url     string
		headers []string
		status  int
		typ     string
		detail  string
	}{
		{url, nil, 428, "urn:idemgen:problem:precondition-required", "GET the resource, and send its ETag header's value as If-Match"},
		{url, []string{"If-None-Match", "*"}, 428, "urn:idemgen:problem:precondition-required", "requires If-Match"},
		{s.url + "/orders/o-new", nil, 428, "urn:idemgen:problem:precondition-required", "requires If-None-Match: *"},
		{s.url + "/orders/o-new", []string{"If-None-Match", `"1"`}, 428, "urn:idemgen:problem:precondition-required", "requires If-None-Match: *"},
		{url, []string{"If-Match", strings.Trim(etag, `"`)}, 400, "urn:idemgen:problem:invalid-precondition", "double quotes included"},
		{url, []string{"If-Match", "W/" + etag}, 400, "urn:idemgen:problem:invalid-precondition", "send the ETag this API returned, without W/"},
		{url, []string{"If-Match", etag + " " + etag}, 400, "urn:idemgen:problem:invalid-precondition", "separated by commas"},
		{s.url + "/orders/o-none/shipping", []string{"If-Match", etag}, 404, "urn:payments:problem:no-order", `order "o-none" does not exist`},
	} {
		body := address("nowhere")
		if strings.HasPrefix(c.url, s.url+"/orders/o-new") {
			body = `{"item":"book"}`
		}
		a := call(t, "PUT", c.url, body, c.headers...)
		if a.status != c.status || a.problem.Type != c.typ || !strings.Contains(a.problem.Detail, c.detail) {
			t.Errorf("PUT %s %q: %d %s; want %d %s saying %q", strings.TrimPrefix(c.url, s.url), c.headers, a.status, a.body, c.status, c.typ, c.detail)
		}
	}
	if now := call(t, "GET", url, ""); now.etag != etag || now.body != address("")+"\n" {
		t.Fatalf("the order holds %s under %s; want it unchanged under %s", now.body, now.etag, etag)
	}
	if n := s.count(`SELECT count(*) FROM orders WHERE id = 'o-new'`); n != 0 {
		t.Fatalf("%d orders o-new; want none", n)
	}
	// Another account's order is not there for this one.
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer acct_bob")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Fatalf("another account's GET: %d; want 404", res.StatusCode)
	}
}
