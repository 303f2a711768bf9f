package idemotel_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idemotel"
)

// TestObserveReplication: on a primary with no standby a collection
// observes no standby, none synchronous and no lag; on a store that cannot
// be reached it succeeds too, counting the failed read and observing no
// gauge; after Unregister nothing more is read.
func TestObserveReplication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// observe registers the instruments on a provider of their own and
	// returns a function that collects them, times times, and returns the
	// last collection by name.
	observe := func(pool *pgxpool.Pool) (metric.Registration, func(times int) map[string]metricdata.Metrics) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { mp.Shutdown(ctx) })
		reg, err := idemotel.ObserveReplication(mp, pool)
		if err != nil {
			t.Fatal(err)
		}
		return reg, func(times int) map[string]metricdata.Metrics {
			got := map[string]metricdata.Metrics{}
			for range times {
				var rm metricdata.ResourceMetrics
				if err := reader.Collect(ctx, &rm); err != nil {
					t.Fatalf("a collection failed: %v", err)
				}
				clear(got)
				for _, sm := range rm.ScopeMetrics {
					for _, m := range sm.Metrics {
						got[m.Name] = m
					}
				}
			}
			return got
		}
	}
	readErrors := func(got map[string]metricdata.Metrics) map[string]int64 {
		out := map[string]int64{}
		for _, dp := range got["idemgen.replication.read_errors"].Data.(metricdata.Sum[int64]).DataPoints {
			r, _ := dp.Attributes.Value(attribute.Key("reason"))
			out[r.AsString()] = dp.Value
		}
		return out
	}

	pool, _ := dbtest.Pool(t)
	_, collect := observe(pool)
	got := collect(1)
	for _, name := range []string{"idemgen.replication.standbys", "idemgen.replication.sync_standbys"} {
		dps := got[name].Data.(metricdata.Gauge[int64]).DataPoints
		if len(dps) != 1 || dps[0].Value != 0 {
			t.Errorf("%s = %+v; want 0", name, dps)
		}
	}
	if _, ok := got["idemgen.replication.lag"]; ok {
		t.Errorf("lag observed with no standby: %+v", got["idemgen.replication.lag"])
	}
	if e := readErrors(got); len(e) != 3 || e["standby"]+e["privilege"]+e["error"] != 0 {
		t.Errorf("read errors %v; want standby, privilege and error at 0", e)
	}

	gone, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	reg, collect := observe(gone)
	got = collect(2)
	if e := readErrors(got); e["error"] != 2 || e["standby"]+e["privilege"] != 0 {
		t.Errorf("read errors %v; want 2 errors, no other", e)
	}
	for _, name := range []string{"idemgen.replication.standbys", "idemgen.replication.lag"} {
		if _, ok := got[name]; ok {
			t.Errorf("%s observed with the store unreachable", name)
		}
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if got := collect(1); len(got) != 0 {
		t.Errorf("collected after Unregister: %v", got)
	}
}
