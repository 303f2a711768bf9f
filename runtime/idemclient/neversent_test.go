package idemclient_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/idemgen/idemgen/runtime/idemclient"
)

// h2Server is an HTTP/2 server over cleartext (prior knowledge) written
// on the protocol's frames, so that it can refuse a stream as RFC 9113
// lets a server: on its first connection, the first POST's HEADERS are
// answered with a GOAWAY whose last stream id excludes them (code
// goAwayCode), and the connection is closed. Every other request is
// processed: counted, and answered 200.
type h2Server struct {
	ln         net.Listener
	goAwayCode http2.ErrCode
	mu         sync.Mutex
	conns      int
	posts      int // POST HEADERS received
	processed  int // requests answered 200
}

func newH2Server(t *testing.T, code http2.ErrCode) *h2Server {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &h2Server{ln: ln, goAwayCode: code}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			first := s.conns == 1
			s.mu.Unlock()
			go s.serve(c, first)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return s
}

func (s *h2Server) serve(c net.Conn, first bool) {
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if fr.WriteSettings() != nil {
		return
	}
	open := map[uint32]bool{}
	answer := func(id uint32) {
		// Counted before the answer goes out: the client may read the
		// counts as soon as it has the answer.
		s.mu.Lock()
		s.processed++
		s.mu.Unlock()
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: true})
		delete(open, id)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.PseudoValue("method") == http.MethodPost {
				s.mu.Lock()
				s.posts++
				s.mu.Unlock()
				if first {
					// Refused: the last stream this connection processes is
					// the one before this one.
					fr.WriteGoAway(max(f.StreamID, 2)-2, s.goAwayCode, nil)
					return
				}
			}
			if f.StreamEnded() {
				answer(f.StreamID)
			} else {
				open[f.StreamID] = true
			}
		case *http2.DataFrame:
			if f.StreamEnded() && open[f.StreamID] {
				answer(f.StreamID)
			}
		}
	}
}

func (s *h2Server) counts() (posts, processed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts, s.processed
}

// h2Client speaks HTTP/2 over cleartext with prior knowledge, through a
// Transport with policy p.
func h2Client(p idemclient.Policy) *http.Client {
	base := &http.Transport{Protocols: new(http.Protocols)}
	base.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &idemclient.Transport{Base: base, Policy: p}}
}

// TestGoAwayExcludingTheStreamIsResent: a POST without a key, which the
// server's GOAWAY excluded (it was not processed), is resent, whatever its
// method, and applied once. With GOAWAY's NO_ERROR net/http's transport
// resends it by itself; with an error code on the connection's first
// stream it returns the error, which idemclient reads as never sent.
func TestGoAwayExcludingTheStreamIsResent(t *testing.T) {
	for _, code := range []http2.ErrCode{http2.ErrCodeNo, http2.ErrCodeEnhanceYourCalm} {
		t.Run(code.String(), func(t *testing.T) {
			s := newH2Server(t, code)
			var attempts []idemclient.Attempt
			p := fast
			p.OnAttempt = func(a idemclient.Attempt) { attempts = append(attempts, a) }
			res, err := h2Client(p).Post("http://"+s.ln.Addr().String()+"/charges", "application/json", strings.NewReader(`{"amount":1}`))
			if err != nil {
				t.Fatalf("%v; want the POST resent and answered (attempts %+v)", err, attempts)
			}
			res.Body.Close()
			posts, processed := s.counts()
			if res.StatusCode != 200 || posts != 2 || processed != 1 {
				t.Fatalf("status %d; the server saw the POST %d times and processed %d requests; want 200, 2 and 1 (attempts %+v)", res.StatusCode, posts, processed, attempts)
			}
			for _, a := range attempts[:len(attempts)-1] {
				if !a.Retry {
					t.Errorf("attempt %d: %+v; want it resent", a.N, a)
				}
			}
		})
	}
}

// TestNoConnectionIsNeverSent: an attempt that never got a connection (the
// server reset it in the TLS handshake, before a byte of the request) is
// resent without a key, whatever its method; one whose connection was
// lost after the request was written is not.
func TestNoConnectionIsNeverSent(t *testing.T) {
	var handled atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	srv.Listener = &resetFirst{Listener: srv.Listener}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	base := srv.Client().Transport.(*http.Transport).Clone()
	var attempts []idemclient.Attempt
	p := fast
	p.OnAttempt = func(a idemclient.Attempt) { attempts = append(attempts, a) }
	c := &http.Client{Transport: &idemclient.Transport{Base: base, Policy: p}}
	res, err := c.Post(srv.URL+"/charges", "application/json", strings.NewReader(`{"amount":1}`))
	if err != nil {
		t.Fatalf("%v; want the POST resent after the reset handshake (attempts %+v)", err, attempts)
	}
	res.Body.Close()
	if res.StatusCode != 201 || handled.Load() != 1 || len(attempts) != 2 || attempts[0].Err == nil {
		t.Fatalf("status %d, handled %d times, attempts %+v; want 201, once, after a failed first attempt", res.StatusCode, handled.Load(), attempts)
	}

	// A POST whose connection dropped after the server read it: the
	// outcome is unknown, and without a key it is not sent again.
	s, url := serve(t, reply{drop: true}, reply{status: 201})
	res, err = (&http.Client{Transport: &idemclient.Transport{Policy: fast}}).Post(url, "application/json", strings.NewReader("{}"))
	if err == nil {
		res.Body.Close()
	}
	if err == nil || len(s.requests()) != 1 {
		t.Fatalf("a dropped POST without a key: %v after %d requests; want the error, not resent", err, len(s.requests()))
	}
}

// resetFirst closes its first connection as soon as it is accepted: the
// client's TLS handshake fails before the request is written.
type resetFirst struct {
	net.Listener
	once sync.Once
}

func (l *resetFirst) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		first := false
		l.once.Do(func() { first = true })
		if !first {
			return c, nil
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset, not a clean close
		}
		c.Close()
	}
}

// TestDeleteAlreadyDone: a DELETE whose first answer is lost (the server
// deleted the resource, then the connection dropped) is retried, answered
// 404, and the call reports the delete done: the resource is gone, as the
// intent asked. A 404 on the first attempt is no such proof.
func TestDeleteAlreadyDone(t *testing.T) {
	s, url := serve(t, reply{drop: true}, reply{status: 404})
	call := idemclient.NewConditional(context.Background())
	req, _ := http.NewRequestWithContext(call.Context(), http.MethodDelete, url+"/customers/cus_1", nil)
	res, err := (&http.Client{Transport: &idemclient.Transport{Policy: fast}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	r := call.Result()
	if res.StatusCode != 404 || len(s.requests()) != 2 || !r.Gone || !r.Done() {
		t.Fatalf("status %d after %d requests, result %+v; want the 404 after 2, Gone and Done", res.StatusCode, len(s.requests()), r)
	}

	// A keyed DELETE whose first answer, a 404, was lost: the retry gets
	// that 404 replayed, the resource never having been there.
	_, url = serve(t, reply{drop: true}, reply{status: 404, header: map[string]string{"Idempotent-Replayed": "true"}})
	keyed := idemclient.NewCall(context.Background(), "", "del-1")
	req, _ = http.NewRequestWithContext(keyed.Context(), http.MethodDelete, url+"/customers/cus_3", nil)
	keyed.SetKey(nil, req)
	res, err = (&http.Client{Transport: &idemclient.Transport{Policy: fast}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if r := keyed.Result(); r.Gone || r.Done() {
		t.Errorf("a replayed 404: %+v; want not done (it is the first attempt's own answer)", r)
	}

	_, url = serve(t, reply{status: 404})
	call = idemclient.NewConditional(context.Background())
	req, _ = http.NewRequestWithContext(call.Context(), http.MethodDelete, url+"/customers/cus_2", nil)
	res, err = (&http.Client{Transport: &idemclient.Transport{Policy: fast}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if r := call.Result(); r.Gone || r.Done() {
		t.Errorf("a first attempt's 404: %+v; want not done (the resource was never there)", r)
	}
}

// TestIfMatchReadBack: a PUT under If-Match whose first attempt succeeded
// (the resource's ETag moved on) and whose answer was lost gets 412 on the
// retry; reading the resource back finds what was sent, so the call is
// Confirmed. A 412 because someone else wrote first is not.
func TestIfMatchReadBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		other     bool // another writer got there first
		confirmed bool
	}{{"our own write", false, true}, {"another writer's", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			etag, doc, puts := `"v1"`, `{"name":"old"}`, 0
			if tc.other {
				etag, doc = `"v2"`, `{"name":"someone else"}`
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if r.Method == http.MethodGet {
					w.Header().Set("ETag", etag)
					io.WriteString(w, doc)
					return
				}
				puts++
				if r.Header.Get("If-Match") != etag {
					w.WriteHeader(http.StatusPreconditionFailed)
					return
				}
				b, _ := io.ReadAll(r.Body)
				etag, doc = `"v2"`, string(b)
				if puts == 1 { // applied, and the answer lost
					conn, _, _ := w.(http.Hijacker).Hijack()
					conn.Close()
					return
				}
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(srv.Close)
			call := idemclient.NewConditional(context.Background())
			req, _ := http.NewRequestWithContext(call.Context(), http.MethodPut, srv.URL+"/profile", strings.NewReader(`{"name":"new"}`))
			req.Header.Set("If-Match", `"v1"`)
			if err := call.Capture(nil, req); err != nil {
				t.Fatal(err)
			}
			res, err := (&http.Client{Transport: &idemclient.Transport{Policy: fast}}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusPreconditionFailed {
				t.Fatalf("status %d; want 412", res.StatusCode)
			}
			ok, err := call.Confirm(context.Background(), func(ctx context.Context) (int, []byte, error) {
				res, err := http.Get(srv.URL + "/profile")
				if err != nil {
					return 0, nil, err
				}
				defer res.Body.Close()
				b, err := io.ReadAll(res.Body)
				return res.StatusCode, b, err
			}, nil)
			if err != nil || ok != tc.confirmed || call.Result().Done() != tc.confirmed {
				t.Errorf("Confirm: %v, %v, result %+v; want confirmed %v", ok, err, call.Result(), tc.confirmed)
			}
		})
	}
}
