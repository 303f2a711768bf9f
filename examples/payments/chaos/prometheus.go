package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// promServer is a Prometheus server beside the round: it scrapes the
// services' /metrics and evaluates the project's alert rules
// (deploy/prometheus/idemgen-rules.yaml), so that the round shows which
// alerts its failures fire, on the series the services export, as a
// production Prometheus would evaluate them.
type promServer struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
}

// startPrometheus starts bin scraping targets (host:port) every interval
// with rules, its data and log in dir, and waits until it is ready.
func startPrometheus(ctx context.Context, bin, rules, dir string, targets []string, interval time.Duration) (*promServer, error) {
	rules, err := filepath.Abs(rules)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(rules); err != nil {
		return nil, fmt.Errorf("prometheus: the rules: %w", err)
	}
	quoted := make([]string, len(targets))
	for i, t := range targets {
		quoted[i] = strconv.Quote(t)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  evaluation_interval: %[1]s
rule_files: [%[2]q]
scrape_configs:
  - job_name: payments
    static_configs:
      - targets: [%[3]s]
`, interval, rules, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &promServer{addr: fmt.Sprintf("127.0.0.1:%d", port), exited: make(chan struct{})}
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "prometheus-data"),
		"--web.listen-address="+p.addr, "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	go func() { p.cmd.Wait(); logf.Close(); close(p.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/-/ready", nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("prometheus exited at start; see %s", filepath.Join(dir, "prometheus.log"))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, errors.New("prometheus: not ready after 30s")
		}
	}
}

func (p *promServer) stop() {
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// sample is one element of an instant vector.
type sample struct {
	labels map[string]string
	value  float64
}

// query evaluates an instant query now.
func (p *promServer) query(ctx context.Context, q string) ([]sample, error) {
	u := "http://" + p.addr + "/api/v1/query?query=" + url.QueryEscape(q)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("prometheus: %s: %w", q, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s: %s", q, body.Error)
	}
	var out []sample
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("prometheus: %s: value %q", q, s)
		}
		out = append(out, sample{labels: r.Metric, value: v})
	}
	return out, nil
}

// Alert is what an alert of the rules did during a round.
type Alert struct {
	Name       string
	State      string   // "firing", or "pending" when its expression held but not for its "for"
	Operations []string // the operations it held for
}

func (a Alert) String() string {
	s := a.Name + " " + a.State
	if len(a.Operations) > 0 {
		s += " (" + strings.Join(a.Operations, ", ") + ")"
	}
	return s
}

// Active reports whether the round saw alert name pending or firing: its
// expression held on the services' series.
func (r *Report) Active(name string) bool {
	for _, a := range r.Alerts {
		if a.Name == name {
			return true
		}
	}
	return false
}

// signals reads, after the round, which alerts were pending or firing at
// any time during it, and the signals' totals over it.
func (r *run) signals(ctx context.Context, since time.Time) error {
	// The last answers reach the series at the next scrape, and the
	// alerts at the evaluation after it.
	time.Sleep(3 * r.cfg.ScrapeEvery)
	window := fmt.Sprintf("%ds", int(time.Since(since).Seconds())+1)
	alerts, err := r.prom.query(ctx, `max by (alertname, alertstate, operation) (max_over_time(ALERTS{alertname=~"Idemgen.*"}[`+window+`]))`)
	if err != nil {
		return err
	}
	byName := map[string]*Alert{}
	for _, s := range alerts {
		a := byName[s.labels["alertname"]]
		if a == nil {
			a = &Alert{Name: s.labels["alertname"], State: "pending"}
			byName[a.Name] = a
		}
		if s.labels["alertstate"] == "firing" {
			a.State = "firing"
		}
		if op := s.labels["operation"]; op != "" && !slices.Contains(a.Operations, op) {
			a.Operations = append(a.Operations, op)
		}
	}
	for _, a := range byName {
		sort.Strings(a.Operations)
		r.report.Alerts = append(r.report.Alerts, *a)
	}
	sort.Slice(r.report.Alerts, func(i, j int) bool { return r.report.Alerts[i].Name < r.report.Alerts[j].Name })
	for _, sig := range []struct{ name, q string }{
		{"claims", `sum(increase(idemgen_events_total{event="claim"}[W]))`},
		{"claims of a request another key claimed", `sum(increase(idemgen_events_total{event="same_request_new_key"}[W]))`},
		{"replays", `sum(increase(idemgen_events_total{event="replay"}[W]))`},
		{"replays past 0.9 of the retention", `sum(increase(idemgen_replay_age_ratio_count[W])) - sum(increase(idemgen_replay_age_ratio_bucket{le="0.9"}[W]))`},
		{"replay age p99 (s, from the buckets)", `histogram_quantile(0.99, sum by (le) (increase(idemgen_replay_age_seconds_bucket[W])))`},
		{"requests whose intent is past the retention", `sum(increase(idemgen_intent_past_retention_total[W]))`},
		{"intent age p99 (s, from the buckets)", `histogram_quantile(0.99, sum by (le) (increase(idemgen_intent_age_seconds_bucket[W])))`},
		{"takeovers", `sum(increase(idemgen_events_total{event="takeover"}[W]))`},
		{"fenced owners", `sum(increase(idemgen_events_total{event="fenced"}[W]))`},
		{"takeovers across a failover", `sum(increase(idemgen_events_total{event="primary_changed"}[W]))`},
		{"replayed failures", `sum(increase(idemgen_replayed_failures_total[W]))`},
		{"replication flush lag, peak (s)", `max(max_over_time(idemgen_replication_lag_seconds{stage="flush"}[W]))`},
		{"replication replay lag, peak (s)", `max(max_over_time(idemgen_replication_lag_seconds{stage="replay"}[W]))`},
	} {
		res, err := r.prom.query(ctx, strings.ReplaceAll(sig.q, "[W]", "["+window+"]"))
		if err != nil {
			return err
		}
		v := 0.0
		if len(res) > 0 {
			v = res[0].value
		}
		r.report.Signals = append(r.report.Signals, Signal{Name: sig.name, Value: v})
	}
	return nil
}

// Signal is one signal's total over a round, as Prometheus computed it
// from the services' series.
type Signal struct {
	Name  string
	Value float64
}
