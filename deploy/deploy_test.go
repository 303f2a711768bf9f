// Package deploy holds what operators load beside an idemgen service: the
// Prometheus rules (alerts, with their unit tests run by make check-alerts)
// and the Grafana dashboard. Its test checks that every query in them names
// a series the code exports, and that every alert has its runbook.
package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemprom"
)

// exported returns the names of the series idemprom exports (a histogram's
// _bucket, _sum and _count), after one event of each kind.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	o, err := idemprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []idem.Event{
		{Kind: idem.EventClaim, Operation: "op", Retention: time.Hour},
		{Kind: idem.EventReplay, Operation: "op", Retention: time.Hour, Status: 503},
		{Kind: idem.EventIntentAge, Operation: "op", Age: 2 * time.Hour, Retention: time.Hour},
		{Kind: idem.EventPhase, Operation: "op", Phase: "p"},
		{Kind: idem.EventPruned, Count: 1},
		{Kind: idem.EventStuck, Count: 1},
	} {
		o.Observe(ev)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+s] = true
			}
		}
	}
	// The replication and reconcile collectors' series, read from the
	// store at a scrape: their names are their descriptions'.
	descs := make(chan *prometheus.Desc)
	go func() {
		idemprom.NewReplicationCollector(nil).Describe(descs)
		idemprom.NewReconcileCollector(nil, idemprom.ReconcileOptions{}).Describe(descs)
		close(descs)
	}()
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names[m[1]] = true
	}
	return names
}

// fqName is a metric's name in its description's String.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

type rulesFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) rulesFile {
	t.Helper()
	b, err := os.ReadFile("prometheus/idemgen-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf rulesFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

// seriesNames are the idemgen series and recording rules an expression
// names.
var seriesNames = regexp.MustCompile(`\bidemgen[a-zA-Z0-9_:]*`)

// known returns what a query may name: the exported series and the
// recording rules.
func known(t *testing.T) map[string]bool {
	names := exported(t)
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				names[r.Record] = true
			}
		}
	}
	return names
}

func TestRulesNameExportedSeries(t *testing.T) {
	names := known(t)
	alerts := 0
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			for _, n := range seriesNames.FindAllString(r.Expr, -1) {
				if !names[n] {
					t.Errorf("rule %s%s names %s, which the code does not export", r.Record, r.Alert, n)
				}
			}
			if r.Alert != "" {
				alerts++
			}
		}
	}
	if alerts < 10 {
		t.Errorf("%d alerts; want one per failure mode, stuck records, the completer and the claim wait (10)", alerts)
	}
}

// TestEveryAlertHasARunbook: each alert's runbook annotation is a heading
// of docs/operations.md.
func TestEveryAlertHasARunbook(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "#") {
			anchors[anchor(strings.TrimLeft(line, "# "))] = true
		}
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			rb := r.Annotations["runbook"]
			file, a, _ := strings.Cut(rb, "#")
			if file != "docs/operations.md" || !anchors[a] {
				t.Errorf("alert %s: runbook %q is not a heading of docs/operations.md", r.Alert, rb)
			}
			if a != strings.ToLower(r.Alert) {
				t.Errorf("alert %s: runbook anchor %q; want its own name", r.Alert, a)
			}
		}
	}
}

// anchor is the fragment a Markdown renderer makes of a heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

type dashboard struct {
	Title       string  `json:"title"`
	Panels      []panel `json:"panels"`
	Annotations struct {
		List []struct {
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// TestDashboardNamesExportedSeries: every query of the dashboard names
// series the code exports (or the rules record), and it shows what
// docs/operations.md says it does.
func TestDashboardNamesExportedSeries(t *testing.T) {
	b, err := os.ReadFile("grafana/idemgen.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/idemgen.json: %v", err)
	}
	names := known(t)
	var exprs, titles []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			titles = append(titles, p.Title)
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				exprs = append(exprs, q.Expr)
			}
		}
	}
	walk(d.Panels)
	for _, a := range d.Annotations.List {
		exprs = append(exprs, a.Expr)
	}
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	used := map[string]bool{}
	for _, e := range exprs {
		for _, n := range seriesNames.FindAllString(e, -1) {
			used[n] = true
			if !names[n] {
				t.Errorf("the dashboard's query %q names %s, which the code does not export", e, n)
			}
		}
	}
	for _, want := range []string{"Replay rate", "409 in flight", "422 key reused", "Keys per request (new key, same request)",
		"Age at replay against retention", "Takeovers and fenced owners", "Phase latency", "Stuck records", "Replication lag"} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q", want)
		}
	}
	for _, n := range []string{"idemgen_replay_age_seconds_bucket", "idemgen_retention_seconds", "idemgen_intent_age_seconds_bucket",
		"idemgen_replayed_failures_total", "idemgen_records_stuck", "idemgen_phase_duration_seconds_bucket", "idemgen:same_request_new_key:ratio5m",
		"idemgen_replication_lag_seconds", "idemgen_replication_sync_standbys"} {
		if !used[n] {
			t.Errorf("the dashboard shows nothing of %s", n)
		}
	}
}
