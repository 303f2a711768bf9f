package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// dbProxy is a toxiproxy proxy between one service and PostgreSQL.
type dbProxy struct {
	proxy *toxiproxy.Proxy
	addr  string
	n     atomic.Int64
	// busy makes faults on one proxy take turns: toxiproxy's link chains
	// panic when toxics are added and removed on one proxy concurrently.
	busy sync.Mutex
}

func newDBProxies(n int, upstream string) ([]*dbProxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	var out []*dbProxy
	for i := 0; i < n; i++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		p := toxiproxy.NewProxy(srv, fmt.Sprintf("pg%d", i), addr, upstream)
		if err := p.Start(); err != nil {
			return nil, err
		}
		out = append(out, &dbProxy{proxy: p, addr: addr})
	}
	return out, nil
}

// connFault is a fault on the connections between a service and the
// database, made by one toxiproxy toxic.
type connFault string

const (
	// connReset resets the connections that carry data.
	connReset connFault = "reset"
	// connCut stops all data and closes the connections after closeAfter.
	connCut connFault = "cut"
	// connLatency delays every byte to the database by closeAfter: a
	// service that stalls past its lease, whose late commits must be fenced.
	connLatency connFault = "latency"
)

// fault applies the toxic of kind for dur.
func (d *dbProxy) fault(kind connFault, closeAfter, dur time.Duration) error {
	defer d.busy.Unlock() // taken by the caller (TryLock), so faults never queue up
	name := fmt.Sprintf("%s-%d", kind, d.n.Add(1))
	var spec string
	switch kind {
	case connReset:
		spec = `{"name":"` + name + `","type":"reset_peer","stream":"downstream","attributes":{"timeout":0}}`
	case connLatency:
		spec = fmt.Sprintf(`{"name":%q,"type":"latency","stream":"upstream","attributes":{"latency":%d}}`, name, closeAfter.Milliseconds())
	case connCut:
		spec = fmt.Sprintf(`{"name":%q,"type":"timeout","stream":"upstream","attributes":{"timeout":%d}}`, name, closeAfter.Milliseconds())
	default:
		return fmt.Errorf("unknown fault %q", kind)
	}
	if _, err := d.proxy.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		return err
	}
	time.Sleep(dur)
	return d.proxy.Toxics.RemoveToxic(context.Background(), name)
}

func (d *dbProxy) close() { d.proxy.Stop() }

// frontProxy spreads requests round-robin over the service instances, so a
// retry after a failure lands on another instance. With probability drop it
// throws away a response after the service produced it and resets the
// client's connection: the client cannot know whether its request took
// effect.
type frontProxy struct {
	backends []string
	next     atomic.Int64
	client   *http.Client
	drop     float64
	rngMu    sync.Mutex // the proxy's own generator, used from its handlers
	rng      *rand.Rand
	dropped  atomic.Int64
	srv      *http.Server
	addr     string
}

func newFrontProxy(backends []string, drop float64, rng *rand.Rand) (*frontProxy, error) {
	f := &frontProxy{backends: backends, drop: drop, rng: rng,
		client: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.addr = ln.Addr().String()
	f.srv = &http.Server{Handler: f}
	go f.srv.Serve(ln)
	return f, nil
}

func (f *frontProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	backend := f.backends[int(f.next.Add(1))%len(f.backends)]
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, "http://"+backend+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	res, err := f.client.Do(req)
	if err != nil {
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	f.rngMu.Lock()
	drop := f.rng.Float64() < f.drop
	f.rngMu.Unlock()
	if drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				if tc, ok := conn.(*net.TCPConn); ok {
					tc.SetLinger(0) // RST, not FIN
				}
				conn.Close()
				f.dropped.Add(1)
				return
			}
		}
	}
	for k, v := range res.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(res.StatusCode)
	w.Write(out)
}

func (f *frontProxy) close() { f.srv.Close() }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// countLines counts log lines containing s in the files matching glob.
func countLines(glob, s string) int {
	files, _ := filepath.Glob(glob)
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n += bytes.Count(data, []byte(s))
	}
	return n
}

var errDeadline = errors.New("deadline passed")
