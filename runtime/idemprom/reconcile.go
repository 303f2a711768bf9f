package idemprom

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

var (
	naturalDupDesc = prometheus.NewDesc("idemgen_natural_key_duplicates",
		"Natural keys (x-idempotency natural-key) that more than one record completed within the window keeps: intents executed under more than one idempotency key (idemgen reconcile lists them).", nil, nil)
	reconcileErrorsDesc = prometheus.NewDesc("idemgen_reconcile_read_errors_total",
		"Reads of the natural-key duplicates that failed or timed out; the gauge keeps its last value.", nil, nil)
)

// ReconcileOptions say what NewReconcileCollector reads.
type ReconcileOptions struct {
	// Window is how far back the count looks (default 1h): natural keys
	// completed more than once within it.
	Window time.Duration
	// Every is how often the count is read at most (default 1m): a scrape
	// between two reads exports the last count. The read groups the
	// window's receipts that keep a natural key (migration 008's index).
	Every time.Duration
	// Timeout bounds one read (default 5s).
	Timeout time.Duration
}

// NewReconcileCollector returns a collector of idemadmin.Reconcile's count
// on e's store:
//
//	idemgen_natural_key_duplicates       gauge: natural keys completed more than once within o.Window
//	idemgen_reconcile_read_errors_total  counter: reads that failed; the gauge keeps its last value
//
// IdemgenNaturalKeyDuplicates alerts on the gauge. It reads at most once
// every o.Every, whatever the scrape interval.
func NewReconcileCollector(e *idem.Engine, o ReconcileOptions) prometheus.Collector {
	if o.Window <= 0 {
		o.Window = time.Hour
	}
	if o.Every <= 0 {
		o.Every = time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	return &reconcileCollector{e: e, o: o}
}

type reconcileCollector struct {
	e      *idem.Engine
	o      ReconcileOptions
	errors atomic.Int64

	mu    sync.Mutex
	read  time.Time // when the count was last read; zero before
	count int
}

func (c *reconcileCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- naturalDupDesc
	ch <- reconcileErrorsDesc
}

func (c *reconcileCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if now := time.Now(); now.Sub(c.read) >= c.o.Every {
		ctx, cancel := context.WithTimeout(context.Background(), c.o.Timeout)
		list, err := idemadmin.Reconcile(ctx, c.e, now.Add(-c.o.Window), 1000)
		cancel()
		if err != nil {
			c.errors.Add(1)
		} else {
			c.read, c.count = now, len(list)
		}
	}
	read, count := c.read, c.count
	c.mu.Unlock()
	if !read.IsZero() {
		ch <- prometheus.MustNewConstMetric(naturalDupDesc, prometheus.GaugeValue, float64(count))
	}
	ch <- prometheus.MustNewConstMetric(reconcileErrorsDesc, prometheus.CounterValue, float64(c.errors.Load()))
}
