package main

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/examples/payments/internal/payer"
	"github.com/idemgen/idemgen/internal/childproc"
	"github.com/idemgen/idemgen/internal/topology"
	"github.com/idemgen/idemgen/pglocal"
)

// proxyOptions size the proxy round.
type proxyOptions struct {
	clients, intents int           // concurrent clients, intents per client (at least: see proxyRound)
	think            time.Duration // pause between a client's intents
	cardLatency      time.Duration // how long a card call takes at cardnet
	killAfter        time.Duration // from the start of the load to the SIGKILL
	down             time.Duration // how long the killed instance stays down
}

// The HAProxy settings of the proxy round. The server timeout is shorter
// than a card call on purpose: HAProxy gives up on every payment's first
// server while its execution is still in flight there, and resends the
// POST to the other instance.
const (
	proxyTimeoutServer  = 700 * time.Millisecond
	proxyTimeoutConnect = 200 * time.Millisecond
	proxyRetries        = 3
)

// The round's clients: each intent's key is minted once, and an attempt is
// resent under it only after a network error, a 5xx or a 429, with backoff;
// a 409 and every other non-2xx answer is final.
const (
	proxyMaxAttempts    = 8
	proxyFirstBackoff   = 250 * time.Millisecond
	proxyMaxBackoff     = 4 * time.Second
	proxyAttemptTimeout = 10 * time.Second
)

// haproxyBin is the haproxy binary: on PATH, or where Debian's package
// puts it (/usr/sbin, which a non-root PATH may lack); "" when missing.
func haproxyBin() string {
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy"
	}
	return ""
}

// ensureHAProxy installs Debian's haproxy package when haproxy is missing
// and this runs as root, as topology.EnsurePackages does for the others;
// otherwise it fails with the line to run. Only the binary is used: the
// round runs it in the foreground with a configuration of its own.
func ensureHAProxy(out io.Writer) error {
	if haproxyBin() != "" {
		return nil
	}
	line := topology.InstallLine([]string{"haproxy"})
	if os.Geteuid() != 0 {
		return fmt.Errorf("topology: missing Debian package haproxy; as root run:\n  apt-get update && %s", line)
	}
	fmt.Fprintln(out, "topology: installing haproxy")
	for _, args := range [][]string{{"apt-get", "update", "-qq"}, {"apt-get", "install", "-y", "-qq", "haproxy"}} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("topology: %s: %w\n%s", strings.Join(args, " "), err, buf.Bytes())
		}
	}
	if haproxyBin() == "" {
		return errors.New("topology: still missing after apt-get install: haproxy")
	}
	return nil
}

// haproxyConfig is the round's haproxy.cfg: HTTP mode, round robin over
// the services, layer-7 retries on every retryable error (connection
// failures, empty and junk responses, the server timeout, 500/502/503/504)
// of every method (no disable-l7-retry), each retry sent to the other
// server (redispatch 1), and no health checks, so a killed instance stays
// in the rotation and its requests are redispatched.
func haproxyConfig(listen int, servers []string) string {
	lines := []string{
		"global",
		"    log stdout format raw local0 info",
		"",
		"defaults",
		"    mode http",
		"    log global",
		// What resolved each request: its method, final status, retries
		// (+ when redispatched), termination state and final server.
		`    log-format "%HM %ST %rc %tsc %b/%s %Ta"`,
		"    retry-on all-retryable-errors",
		"    retries " + strconv.Itoa(proxyRetries),
		"    option redispatch 1",
		"    timeout connect " + strconv.FormatInt(proxyTimeoutConnect.Milliseconds(), 10) + "ms",
		"    timeout client 30s",
		"    timeout server " + strconv.FormatInt(proxyTimeoutServer.Milliseconds(), 10) + "ms",
		"",
		"frontend payments",
		fmt.Sprintf("    bind 127.0.0.1:%d", listen),
		"    default_backend services",
		"",
		"backend services",
		"    balance roundrobin",
	}
	for i, s := range servers {
		lines = append(lines, fmt.Sprintf("    server p%d %s", i, s))
	}
	return strings.Join(append(lines, ""), "\n")
}

// haproxy is HAProxy in the foreground (-db), a child of this process.
type haproxy struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

func startHAProxy(dir string, listen int, servers []string) (*haproxy, error) {
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(listen, servers)), 0o644); err != nil {
		return nil, err
	}
	h := &haproxy{log: filepath.Join(dir, "haproxy.log"), exited: make(chan struct{})}
	logf, err := os.Create(h.log)
	if err != nil {
		return nil, err
	}
	h.cmd = exec.Command(haproxyBin(), "-f", cfg, "-db")
	h.cmd.Stdout, h.cmd.Stderr = logf, logf
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("topology: starting haproxy: %w", err)
	}
	go func() { h.cmd.Wait(); logf.Close(); close(h.exited) }()
	addr := fmt.Sprintf("127.0.0.1:%d", listen)
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return h, nil
		}
		select {
		case <-h.exited:
			out, _ := os.ReadFile(h.log)
			return nil, fmt.Errorf("topology: haproxy exited: %s", bytes.TrimSpace(out))
		default:
		}
		if time.Since(start) > 10*time.Second {
			h.stop()
			return nil, fmt.Errorf("topology: haproxy did not listen on %s within 10s; see %s", addr, h.log)
		}
	}
}

// stop ends haproxy (SIGTERM: at once), and kills it after 5s.
func (h *haproxy) stop() {
	if h == nil || h.cmd == nil {
		return
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(5 * time.Second):
		h.cmd.Process.Kill()
		<-h.exited
	}
	h.cmd = nil
}

// haproxyStats is what HAProxy's log says of the POSTs it resolved: one
// line per request, with its final attempt's server and status.
type haproxyStats struct {
	posts, resent, redispatched int
	retries                     map[int]int    // retries -> requests
	status                      map[string]int // final status -> requests
	states                      map[string]int // termination state other than ---- -> requests
}

func readHAProxyLog(path string) haproxyStats {
	st := haproxyStats{retries: map[int]int{}, status: map[string]int{}, states: map[string]int{}}
	f, err := os.Open(path)
	if err != nil {
		return st
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// %HM %ST %rc %tsc %b/%s %Ta
		fields := strings.Fields(sc.Text())
		if len(fields) != 6 || fields[0] != http.MethodPost {
			continue
		}
		st.posts++
		st.status[fields[1]]++
		if strings.HasPrefix(fields[2], "+") {
			st.redispatched++
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(fields[2], "+"))
		st.retries[n]++
		if n > 0 {
			st.resent++
		}
		if fields[3] != "----" {
			st.states[fields[3]]++
		}
	}
	return st
}

func (st haproxyStats) String() string {
	counts := func(m map[string]int) string {
		var out []string
		for k, n := range m {
			out = append(out, fmt.Sprintf("%s x%d", k, n))
		}
		sort.Strings(out)
		if len(out) == 0 {
			return "none"
		}
		return strings.Join(out, ", ")
	}
	retries := map[string]int{}
	for r, n := range st.retries {
		retries[strconv.Itoa(r)] = n
	}
	return fmt.Sprintf("%d POSTs, %d resent after a failed attempt (%d redispatched to the other instance); retries per POST: %s;\n    final statuses: %s; termination states other than ----: %s",
		st.posts, st.resent, st.redispatched, counts(retries), counts(st.status), counts(st.states))
}

// proxyIntent is one payment a client wants made once.
type proxyIntent struct {
	id, key, customer, account string
	amount                     int64

	attempts    int
	statuses    []int // per attempt; 0 for a network error
	status      int   // the final answer's status; 0 when the client gave up
	body        []byte
	last        string // what ended the client's call
	latency     time.Duration
	conflicts   int
	pendingLeft bool // its payment was pending once the clients and the services were done
	checker     int  // the status the checker's own replay got; 0 if it made none
}

func (in *proxyIntent) ok() bool { return in.status >= 200 && in.status < 300 }

// proxyClient sends one intent's POSTs through base.
type proxyClient struct {
	http *http.Client
	base string
}

// post sends one attempt of in under its key.
func (c proxyClient) post(ctx context.Context, in *proxyIntent) (int, http.Header, []byte, error) {
	body, _ := json.Marshal(payer.Payment(in.amount, in.customer, ""))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/payments", bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", in.key)
	req.Header.Set("Authorization", "Bearer "+in.account)
	res, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return res.StatusCode, res.Header, data, nil
}

// pay is the client's call: up to proxyMaxAttempts attempts under the
// intent's key, retried only after a network error, a 5xx or a 429, with
// exponential backoff (longer if Retry-After says so). A 409, like every
// other non-2xx answer, is final: the client reports the payment failed.
func (c proxyClient) pay(ctx context.Context, in *proxyIntent) {
	start := time.Now()
	defer func() { in.latency = time.Since(start) }()
	wait := proxyFirstBackoff
	for in.attempts < proxyMaxAttempts {
		in.attempts++
		actx, cancel := context.WithTimeout(ctx, proxyAttemptTimeout)
		status, hdr, body, err := c.post(actx, in)
		cancel()
		in.statuses = append(in.statuses, status)
		switch {
		case err != nil:
			in.last = "network error: " + err.Error()
		case status == http.StatusConflict:
			in.conflicts++
			in.status, in.body, in.last = status, body, answerSummary(status, body)
			return
		case status >= 500 || status == http.StatusTooManyRequests:
			in.last = answerSummary(status, body)
			if s, err := strconv.Atoi(hdr.Get("Retry-After")); err == nil && time.Duration(s)*time.Second > wait {
				wait = time.Duration(s) * time.Second
			}
		default:
			in.status, in.body, in.last = status, body, answerSummary(status, body)
			return
		}
		if in.attempts == proxyMaxAttempts {
			break
		}
		time.Sleep(wait)
		wait = min(2*wait, proxyMaxBackoff)
	}
	in.last = fmt.Sprintf("gave up after %d attempts: %s", in.attempts, in.last)
}

// answerSummary is an answer's status and, for a problem (RFC 9457), its
// type.
func answerSummary(status int, body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) == nil && p.Type != "" {
		return fmt.Sprintf("%d %s", status, p.Type)
	}
	return strconv.Itoa(status)
}

// proxyRound runs the payments example behind HAProxy with layer-7 retries
// of POSTs and a server timeout shorter than a card call, kills one of the
// two instances during the load, and checks each intent against the card
// network's charges and the payments table:
//
//   - a duplicate is an intent charged twice, or with two payments rows;
//   - a loss is an intent answered 2xx with no charge (or no succeeded
//     payment naming it), or charged with no succeeded payment;
//   - a client-visible failure is an intent whose client's final answer was
//     an error (a 409, another non-2xx, or giving up) although its card
//     was charged and its payment recorded.
//
// HAProxy resends each POST to the other instance once the first did not
// answer within its server timeout, while the execution is still in
// flight there: what that duplicate is answered is what the round tests.
//
// Before judging, the checker asks again, under its key and directly to
// the instance never killed, for every intent whose client got an error
// and whose payment row exists, until it gets the stored answer: an
// execution the kill cut after its client's final answer (nobody else
// would retry it) is taken over and finished, and counted as such.
func proxyRound(ctx context.Context, o options, c *cleanups, dir string) (string, error) {
	var b strings.Builder
	po := o.proxy
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", harness(err)
	}
	cluster, err := pglocal.Start(ctx, pglocal.Options{})
	if err != nil {
		return "", harness(err)
	}
	c.add(func() { cluster.Stop() })
	defer cluster.Stop()
	if err := cluster.CreateDatabase(ctx, "payments"); err != nil {
		return "", harness(err)
	}
	dbURL := cluster.URL("payments")
	secret := make([]byte, 32)
	crand.Read(secret)
	secretEnv := cardnet.SecretEnv + "=" + hex.EncodeToString(secret)

	card := &childproc.Process{Name: "cardnet", Bin: o.cardnet, Log: filepath.Join(dir, "cardnet.log"),
		Args: []string{"-addr", "127.0.0.1:0", "-latency", po.cardLatency.String()}}
	if err := card.Start(30 * time.Second); err != nil {
		return "", harness(err)
	}
	c.add(card.Stop)
	defer card.Stop()

	ports, err := proxyFreePorts(3)
	if err != nil {
		return "", harness(err)
	}
	var services []*childproc.Process
	var addrs []string
	for i := range 2 {
		addr := fmt.Sprintf("127.0.0.1:%d", ports[i])
		s := &childproc.Process{Name: fmt.Sprintf("payments-%d", i), Bin: o.payments,
			Args: []string{"-addr", addr, "-card-url", "http://" + card.Addr(), "-mail-sink", filepath.Join(dir, "mail.jsonl")},
			Env:  []string{"DATABASE_URL=" + dbURL + "&pool_max_conns=16&connect_timeout=5", secretEnv},
			Log:  filepath.Join(dir, fmt.Sprintf("payments-%d.log", i))}
		if err := s.Start(60 * time.Second); err != nil {
			return "", harness(err)
		}
		c.add(s.Stop)
		defer s.Stop()
		services, addrs = append(services, s), append(addrs, addr)
	}
	hp, err := startHAProxy(dir, ports[2], addrs)
	if err != nil {
		return "", harness(err)
	}
	c.add(hp.stop)
	defer hp.stop()
	version, _ := exec.Command(haproxyBin(), "-v").Output()
	if f := strings.Fields(string(version)); len(f) > 2 && f[1] == "version" {
		version = []byte("HAProxy " + f[2])
	}
	fmt.Fprintf(&b, "%s in front of 2 payments instances (%s), mode http, balance roundrobin,\n", bytes.TrimSpace(version), strings.Join(addrs, ", "))
	fmt.Fprintf(&b, "  retry-on all-retryable-errors, retries %d, option redispatch 1, timeout server %s, timeout connect %s, no health checks;\n",
		proxyRetries, proxyTimeoutServer, proxyTimeoutConnect)
	fmt.Fprintf(&b, "  a card call takes %s at cardnet; %d clients, at least %d intents each (%s apart), each under one key: 409 and other 4xx final,\n",
		po.cardLatency, po.clients, po.intents, po.think)
	fmt.Fprintf(&b, "  network errors, 5xx and 429 retried up to %d attempts (backoff %s doubling to %s)\n", proxyMaxAttempts, proxyFirstBackoff, proxyMaxBackoff)

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return b.String(), harness(err)
	}
	defer conn.Close(context.Background())
	pending := func() int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM payments WHERE status = 'pending'`).Scan(&n); err != nil {
			return -1
		}
		return n
	}

	// The load, and the kill during it.
	client := proxyClient{base: fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * po.clients}}}
	all := make([][]*proxyIntent, po.clients)
	newIntent := func(cl, i int, rng *rand.Rand) *proxyIntent {
		id := fmt.Sprintf("c%02d-i%03d", cl, i)
		return &proxyIntent{id: id, key: fmt.Sprintf("%s-%016x", id, rng.Uint64()), // minted once, before any attempt
			customer: id + "@proxy.test", account: fmt.Sprintf("acct_%d", cl%4), amount: proxyAmount(rng)}
	}
	start := time.Now()
	type killResult struct {
		note    string
		problem string // why the kill did not go as planned
	}
	killed := make(chan killResult, 1)
	back := make(chan struct{}) // closed once the killed instance is back
	go func() {
		defer close(back)
		time.Sleep(po.killAfter)
		before := pending()
		pid := services[0].Pid()
		services[0].Kill()
		at := time.Since(start)
		time.Sleep(po.down)
		r := killResult{note: fmt.Sprintf("SIGKILL of payments-0 (pid %d) at %s, with %d payments pending (card calls in flight on either instance); ",
			pid, at.Round(100*time.Millisecond), before)}
		if before <= 0 {
			r.problem = "no payment was pending at the kill"
		}
		if err := proxyRestart(services[0]); err != nil {
			r.note += "restart FAILED: " + err.Error()
			r.problem = "the killed instance did not restart"
		} else {
			r.note += fmt.Sprintf("restarted on %s %s after the kill", services[0].Addr(), (time.Since(start) - at).Round(100*time.Millisecond))
		}
		killed <- r
	}()
	var wg sync.WaitGroup
	for cl := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.seed, uint64(100+cl)))
			// At least po.intents each, and more while the killed
			// instance is not back: the kill and the restart land on
			// live traffic however fast the answers come.
			for i := 0; ; i++ {
				if i >= po.intents {
					select {
					case <-back:
						return
					default:
					}
				}
				in := newIntent(cl, i, rng)
				all[cl] = append(all[cl], in)
				client.pay(ctx, in)
				time.Sleep(po.think)
			}
		}()
	}
	wg.Wait()
	load := time.Since(start)
	kill := <-killed
	fmt.Fprintf(&b, "  %s\n", kill.note)
	var planProblems []string
	if kill.problem != "" {
		planProblems = append(planProblems, kill.problem)
	}
	if load < po.killAfter+po.down {
		planProblems = append(planProblems, fmt.Sprintf("the load ended after %s, before the killed instance was back", load.Round(time.Millisecond)))
	}

	// The executions the clients left behind finish on their own (the
	// engine runs them detached from the request): wait until the count of
	// pending payments stops moving.
	last, still := pending(), time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && time.Since(still) < 2500*time.Millisecond; time.Sleep(250 * time.Millisecond) {
		if n := pending(); n != last {
			last, still = n, time.Now()
		}
	}
	rows, err := proxyPayments(ctx, conn)
	if err != nil {
		return b.String(), harness(err)
	}
	// The checker's replay: every intent the client gave up on whose
	// payment row exists is asked again under its key, directly to the
	// instance that was never killed, patiently (past a dead owner's lease),
	// so that what the engine stored is what is judged. A payment still
	// pending here had its execution cut by the kill after the client's
	// final answer: the replay takes it over and finishes it.
	cards := &cardnet.Client{URL: "http://" + card.Addr()}
	before, err := cards.Charges(ctx) // what was charged before the checker asked anything
	if err != nil {
		return b.String(), harness(err)
	}
	chargedBefore := map[string]bool{}
	for _, ch := range before {
		chargedBefore[ch.Customer] = true
	}
	checker := proxyClient{base: "http://" + services[1].Addr(), http: &http.Client{Timeout: 30 * time.Second}}
	var cwg sync.WaitGroup
	for _, intents := range all {
		for _, in := range intents {
			p := rows[in.customer]
			if in.ok() || len(p) == 0 {
				continue
			}
			in.pendingLeft = slices.ContainsFunc(p, func(r proxyRow) bool { return r.status == "pending" })
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				for end := time.Now().Add(45 * time.Second); time.Now().Before(end); {
					status, hdr, _, err := checker.post(ctx, in)
					in.checker = status
					if err == nil && status != http.StatusConflict && status < 500 {
						return
					}
					wait := time.Second
					if s, err := strconv.Atoi(hdr.Get("Retry-After")); err == nil && s > 0 {
						wait = time.Duration(s) * time.Second
					}
					time.Sleep(wait)
				}
			}()
		}
	}
	cwg.Wait()

	// The truth: the card network's charges and the payments rows.
	if rows, err = proxyPayments(ctx, conn); err != nil {
		return b.String(), harness(err)
	}
	charges, err := cards.Charges(ctx)
	if err != nil {
		return b.String(), harness(err)
	}
	byCustomer := map[string][]cardnet.Charge{}
	for _, ch := range charges {
		byCustomer[ch.Customer] = append(byCustomer[ch.Customer], ch)
	}

	var n struct {
		intents, attempts, first2xx, retried2xx, conflicts, other4xx, gaveUp, network, errs5xx int
		noEffect, pendingLeft, chargedByChecker, unsettled, dups, losses, failures             int
	}
	var problems, failures []string
	var latencies []time.Duration
	for _, intents := range all {
		for _, in := range intents {
			n.intents++
			n.attempts += in.attempts
			n.conflicts += in.conflicts
			latencies = append(latencies, in.latency)
			for _, s := range in.statuses {
				switch {
				case s == 0:
					n.network++
				case s >= 500:
					n.errs5xx++
				}
			}
			switch {
			case in.ok() && in.attempts == 1:
				n.first2xx++
			case in.ok():
				n.retried2xx++
			case in.status == 0:
				n.gaveUp++
			case in.status != http.StatusConflict:
				n.other4xx++
			}
			if in.pendingLeft {
				n.pendingLeft++
			}
			p, chs := rows[in.customer], byCustomer[in.customer]
			say := func(format string, args ...any) string {
				return fmt.Sprintf("%s key=%s attempts=%d statuses=%v last=%q: %s", in.id, in.key, in.attempts, in.statuses, in.last, fmt.Sprintf(format, args...))
			}
			if len(chs) > 1 || len(p) > 1 {
				n.dups++
				problems = append(problems, say("%d charges at cardnet, %d payments rows %v", len(chs), len(p), p))
				continue
			}
			recorded := len(p) == 1 && p[0].status == "succeeded"
			switch {
			case in.ok() && len(chs) == 0:
				n.losses++
				problems = append(problems, say("answered %d but no charge at cardnet", in.status))
			case in.ok() && !recorded:
				n.losses++
				problems = append(problems, say("answered %d but the payment is %v", in.status, p))
			case in.ok() && !bytes.Contains(in.body, []byte(`"`+chs[0].ID+`"`)):
				n.losses++
				problems = append(problems, say("answered %d naming another charge than %s: %s", in.status, chs[0].ID, bytes.TrimSpace(in.body)))
			case in.ok():
			case len(chs) == 1 && !recorded:
				n.losses++
				problems = append(problems, say("charged (%s) but the payment is %v after the checker's replay (%d)", chs[0].ID, p, in.checker))
			case len(chs) == 1 && p[0].chargeID != chs[0].ID:
				n.losses++
				problems = append(problems, say("charged %s but the payment records charge %q", chs[0].ID, p[0].chargeID))
			case len(chs) == 1 && !chargedBefore[in.customer]:
				// Cut by the kill before its card call: the checker's
				// replay made the charge, so the client's error was true
				// when it got it.
				n.chargedByChecker++
			case len(chs) == 1:
				n.failures++
				how := "completed by its own execution"
				if in.pendingLeft {
					how = "completed only by the checker's replay"
				}
				failures = append(failures, say("charged %s and recorded (%s), but the client's final answer was an error", chs[0].ID, how))
			case recorded:
				n.losses++
				problems = append(problems, say("recorded %v but no charge at cardnet", p))
			case len(p) == 1:
				// Claimed and never charged, even by the checker's replay.
				n.unsettled++
				problems = append(problems, say("payment %v not charged, not settled by the checker's replay (%d)", p, in.checker))
			default:
				n.noEffect++
			}
		}
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	row := func(k string, v any) { fmt.Fprintf(&b, "  %-58s %v\n", k, v) }
	row("intents", n.intents)
	row("client attempts", n.attempts)
	row("answered 2xx first time", n.first2xx)
	row("answered 2xx after retries", n.retried2xx)
	row("409s seen (final)", n.conflicts)
	row("other final 4xx", n.other4xx)
	row(fmt.Sprintf("gave up (network errors, 5xx or 429; %d attempts)", proxyMaxAttempts), n.gaveUp)
	row("final errors with no effect (no charge, no payment)", n.noEffect)
	row("network errors / 5xx seen by clients", fmt.Sprintf("%d / %d", n.network, n.errs5xx))
	if len(latencies) > 0 {
		row("latency to the final answer", fmt.Sprintf("median %s, max %s", latencies[len(latencies)/2].Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond)))
	}
	fmt.Fprintf(&b, "  HAProxy's log: %s\n", readHAProxyLog(hp.log))
	row("still pending when the clients had stopped", fmt.Sprintf("%d (finished by the checker's replay; %d of them charged only then)", n.pendingLeft, n.chargedByChecker))
	row("card charges / payments rows", fmt.Sprintf("%d / %d", len(charges), proxyRowCount(rows)))
	row("load / wall time", fmt.Sprintf("%s / %s", load.Round(time.Millisecond), time.Since(start).Round(time.Millisecond)))
	fmt.Fprintf(&b, "  duplicates (charges made twice for one intent): %d  must be 0\n", n.dups)
	fmt.Fprintf(&b, "  losses (intents answered 2xx with no charge, or charged with no record): %d  must be 0\n", n.losses)
	fmt.Fprintf(&b, "  client-visible failures for operations that succeeded: %d  must be 0\n", n.failures)

	var errs []error
	if n.dups > 0 || n.losses > 0 || n.unsettled > 0 {
		sort.Strings(problems)
		errs = append(errs, fmt.Errorf("broken promise: %d duplicates, %d losses, %d unsettled:\n  %s", n.dups, n.losses, n.unsettled, strings.Join(problems, "\n  ")))
	}
	if n.failures > 0 {
		sort.Strings(failures)
		shown := failures[:min(len(failures), 5)]
		more := ""
		if len(failures) > len(shown) {
			more = fmt.Sprintf("\n  ... and %d more", len(failures)-len(shown))
		}
		errs = append(errs, fmt.Errorf("%d client-visible failures for operations that succeeded, e.g.:\n  %s%s", n.failures, strings.Join(shown, "\n  "), more))
	}
	if st := readHAProxyLog(hp.log); st.resent == 0 {
		planProblems = append(planProblems, "HAProxy resent no POST")
	}
	if len(planProblems) > 0 {
		errs = append(errs, fmt.Errorf("the round did not run as planned: %s", strings.Join(planProblems, "; ")))
	}
	return b.String(), errors.Join(errs...)
}

// proxyAmount is a payment's amount: never the one the card network
// declines, so that every intent can succeed.
func proxyAmount(rng *rand.Rand) int64 {
	a := int64(100 + rng.IntN(9000))
	if a == cardnet.DeclinedAmount {
		a++
	}
	return a
}

// proxyRow is one payments row.
type proxyRow struct {
	status, chargeID string
}

// proxyPayments reads the payments rows by customer.
func proxyPayments(ctx context.Context, conn *pgx.Conn) (map[string][]proxyRow, error) {
	rows, err := conn.Query(ctx, `SELECT customer, status, coalesce(charge_id, '') FROM payments ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]proxyRow{}
	for rows.Next() {
		var customer string
		var r proxyRow
		if err := rows.Scan(&customer, &r.status, &r.chargeID); err != nil {
			return nil, err
		}
		out[customer] = append(out[customer], r)
	}
	return out, rows.Err()
}

func proxyRowCount(rows map[string][]proxyRow) int {
	n := 0
	for _, p := range rows {
		n += len(p)
	}
	return n
}

// proxyRestart starts a killed service again on its port, retrying for up
// to 30s (the port may take a moment to be free).
func proxyRestart(s *childproc.Process) error {
	var err error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if err = s.Start(30 * time.Second); err == nil || errors.Is(err, childproc.ErrRunning) {
			return nil
		}
	}
	return err
}

// proxyFreePorts returns n distinct loopback ports that were free.
func proxyFreePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
