package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/internal/testshort"
)

// TestConcurrentRefundsNeverExceedThePayment: refunds of one payment under
// different keys, all at once, never add up to more than the payment; and
// an amount near the largest int64 is refused, not overflowed.
func TestConcurrentRefundsNeverExceedThePayment(t *testing.T) {
	s := newService(t)
	created := do(t, s.url+"/payments", hdrs("pay-1"), payment) // 1000 EUR cents
	if created.status != 201 {
		t.Fatalf("payment: %d %s", created.status, created.body)
	}
	var p struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal([]byte(created.body), &p); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := do(t, s.url+"/refunds", hdrs(fmt.Sprintf("refund-%d", i)), fmt.Sprintf(`{"payment_id":%d,"amount":600}`, p.ID))
			statuses[i] = a.status
		}()
	}
	wg.Wait()
	ok := 0
	for _, st := range statuses {
		switch st {
		case 201:
			ok++
		case 409:
		default:
			t.Errorf("refund answered %d", st)
		}
	}
	if total := s.count(fmt.Sprintf(`SELECT coalesce(sum(amount), 0)::int FROM refunds WHERE payment_id = %d`, p.ID)); total > 1000 || ok != 1 {
		t.Fatalf("%d of %d refunds of 600 succeeded, %d refunded in all, of a 1000 payment", ok, n, total)
	}
	huge := do(t, s.url+"/refunds", hdrs("refund-huge"), fmt.Sprintf(`{"payment_id":%d,"amount":%d}`, p.ID, int64(math.MaxInt64)))
	if huge.status != 409 || !strings.Contains(huge.body, "too-much") {
		t.Fatalf("a refund of MaxInt64: %d %s; want 409 too-much", huge.status, huge.body)
	}
	if n := s.count(fmt.Sprintf(`SELECT count(*) FROM refunds WHERE payment_id = %d`, p.ID)); n != 1 {
		t.Fatalf("%d refunds recorded; want 1", n)
	}
}

// TestServerTimeouts: the server sets its timeouts, and a client that never
// finishes its headers is disconnected instead of holding the connection.
func TestServerTimeouts(t *testing.T) {
	s := newService(t)
	e := s.e.(*echo.Echo)
	srv := e.Server
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Fatalf("timeouts: read-header %v read %v write %v idle %v; want all set", srv.ReadHeaderTimeout, srv.ReadTimeout,
			srv.WriteTimeout, srv.IdleTimeout)
	}
	testshort.Long(t) // the slow client below waits out the read-header timeout
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /payments HTTP/1.1\r\nHost: x\r\n") // and never the blank line
	conn.SetReadDeadline(time.Now().Add(3 * api.ReadHeaderTimeout))
	if _, err := io.ReadAll(bufio.NewReader(conn)); err != nil {
		t.Fatalf("the server kept a connection with unfinished headers open: %v", err)
	}
}

// TestRecoverMiddleware: a panic in a handler is a 500 problem, and the
// server goes on serving.
func TestRecoverMiddleware(t *testing.T) {
	s := newService(t)
	e := s.e.(*echo.Echo)
	e.GET("/boom", func(c echo.Context) error { panic("handler bug") })
	res, err := http.Get(s.url + "/boom")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 500 || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("panic: %d %s; want a 500 problem", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if a := do(t, s.url+"/payments", hdrs("after-panic"), payment); a.status != 201 {
		t.Fatalf("after the panic: %d", a.status)
	}
}
