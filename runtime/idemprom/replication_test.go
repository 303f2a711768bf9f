package idemprom_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgen/idemgen/internal/dbtest"
	"github.com/idemgen/idemgen/runtime/idemprom"
)

const readErrorsHelp = `
# HELP idemgen_replication_read_errors_total Scrapes that could not read the store's replication, by reason: standby, privilege (grant pg_monitor), error.
# TYPE idemgen_replication_read_errors_total counter
`

// TestReplicationCollectorWithoutStandby: on a primary with no standby the
// scrape says so (no standby, none synchronous, no lag series); on a store
// that cannot be reached it succeeds too, counting the failed read and
// exporting no gauge.
func TestReplicationCollectorWithoutStandby(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.Pool(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(idemprom.NewReplicationCollector(pool))
	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP idemgen_replication_standbys Standbys streaming from the store's primary.
# TYPE idemgen_replication_standbys gauge
idemgen_replication_standbys 0
# HELP idemgen_replication_sync_standbys Standbys whose acknowledgement the primary's commits wait for (sync_state sync or quorum): a failover to one of them loses nothing acknowledged.
# TYPE idemgen_replication_sync_standbys gauge
idemgen_replication_sync_standbys 0
`+readErrorsHelp+`idemgen_replication_read_errors_total{reason="error"} 0
idemgen_replication_read_errors_total{reason="privilege"} 0
idemgen_replication_read_errors_total{reason="standby"} 0
`))
	if err != nil {
		t.Error(err)
	}

	gone, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	reg = prometheus.NewRegistry()
	reg.MustRegister(idemprom.NewReplicationCollector(gone))
	for range 2 {
		if _, err := reg.Gather(); err != nil {
			t.Fatalf("a scrape with the store unreachable failed: %v", err)
		}
	}
	err = testutil.GatherAndCompare(reg, strings.NewReader(readErrorsHelp+`idemgen_replication_read_errors_total{reason="error"} 3
idemgen_replication_read_errors_total{reason="privilege"} 0
idemgen_replication_read_errors_total{reason="standby"} 0
`))
	if err != nil {
		t.Error(err)
	}
	if n, _ := testutil.GatherAndCount(reg, "idemgen_replication_standbys", "idemgen_replication_lag_seconds"); n != 0 {
		t.Errorf("%d gauges with the store unreachable; want none", n)
	}
}

// TestReplicationCollectorOfStreamingStandbys: a primary with two standbys
// that share a name (application_name left to its default) exports one
// series per stage for the name, two standbys and the synchronous ones;
// a collector on a standby counts its reads refused and exports no gauge.
func TestReplicationCollectorOfStreamingStandbys(t *testing.T) {
	t.Parallel()
	primary, standbys := dbtest.PrimaryAndStandbys(t, "walreceiver", "walreceiver")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, primary.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(idemprom.NewReplicationCollector(pool))
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP idemgen_replication_standbys Standbys streaming from the store's primary.
# TYPE idemgen_replication_standbys gauge
idemgen_replication_standbys 2
# HELP idemgen_replication_sync_standbys Standbys whose acknowledgement the primary's commits wait for (sync_state sync or quorum): a failover to one of them loses nothing acknowledged.
# TYPE idemgen_replication_sync_standbys gauge
idemgen_replication_sync_standbys 0
`), "idemgen_replication_standbys", "idemgen_replication_sync_standbys")
	if err != nil {
		t.Error(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var stages []string
	for _, f := range families {
		if f.GetName() != "idemgen_replication_lag_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["standby"] != "walreceiver" || m.GetGauge().GetValue() < 0 {
				t.Errorf("lag series %v = %v", labels, m.GetGauge().GetValue())
			}
			stages = append(stages, labels["stage"])
		}
	}
	if strings.Join(stages, ",") != "flush,replay,write" {
		t.Errorf("lag series by stage %v; want one each of flush, replay, write", stages)
	}

	onStandby, err := pgxpool.New(ctx, standbys[0].DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer onStandby.Close()
	reg = prometheus.NewRegistry()
	reg.MustRegister(idemprom.NewReplicationCollector(onStandby))
	err = testutil.GatherAndCompare(reg, strings.NewReader(readErrorsHelp+`idemgen_replication_read_errors_total{reason="error"} 0
idemgen_replication_read_errors_total{reason="privilege"} 0
idemgen_replication_read_errors_total{reason="standby"} 1
`))
	if err != nil {
		t.Error(err)
	}
}
