package idemprom

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

var (
	lagDesc = prometheus.NewDesc("idemgen_replication_lag_seconds",
		"Replication lag of each standby of the store's primary, by stage: write, flush (what a failover to it keeps) and replay; 0 while it is caught up and no WAL is written.",
		[]string{"standby", "stage"}, nil)
	standbysDesc = prometheus.NewDesc("idemgen_replication_standbys",
		"Standbys streaming from the store's primary.", nil, nil)
	syncDesc = prometheus.NewDesc("idemgen_replication_sync_standbys",
		"Standbys whose acknowledgement the primary's commits wait for (sync_state sync or quorum): a failover to one of them loses nothing acknowledged.", nil, nil)
	readErrorsDesc = prometheus.NewDesc("idemgen_replication_read_errors_total",
		"Scrapes that could not read the store's replication, by reason: standby, privilege (grant pg_monitor), error.", []string{"reason"}, nil)
	// Why a scrape could not read the replication: the pool reaches a
	// standby; the role may not see the standbys' state (grant it
	// pg_monitor); the read failed or took longer than
	// idemadmin.ReplicationTimeout.
	readErrorReasons = []string{"standby", "privilege", "error"}
)

// NewReplicationCollector returns a collector of the replication of the
// primary that db (the engine's pool) reaches, read from its
// pg_stat_replication at each scrape by idemadmin.Replication (one
// statement, at most idemadmin.ReplicationTimeout). Register it beside New's
// metrics:
//
//	idemgen_replication_lag_seconds{standby,stage}  gauge: write, flush and replay lag of each standby
//	                                                (application_name; standbys sharing a name are one
//	                                                series, their largest lag); 0 while it is caught up
//	idemgen_replication_standbys                    gauge: standbys streaming from the primary
//	idemgen_replication_sync_standbys               gauge: of them, those the primary's commits wait for
//	idemgen_replication_read_errors_total{reason}   counter: scrapes that could not read them: standby,
//	                                                privilege, error
//
// A scrape that cannot read them (a standby, a role without pg_monitor,
// the primary unreachable during a failover) exports only the counter: it
// never fails the scrape.
func NewReplicationCollector(db idem.Querier) prometheus.Collector {
	return &replicationCollector{db: db}
}

type replicationCollector struct {
	db     idem.Querier
	errors [3]atomic.Int64 // by readErrorReasons
}

func (c *replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lagDesc, standbysDesc, syncDesc, readErrorsDesc} {
		ch <- d
	}
}

func (c *replicationCollector) Collect(ch chan<- prometheus.Metric) {
	info, err := idemadmin.Replication(context.Background(), c.db)
	if err != nil {
		c.errors[readErrorIndex(err)].Add(1)
	} else {
		for name, l := range info.Lags() {
			for i, stage := range []string{"write", "flush", "replay"} {
				ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, l[i].Seconds(), name, stage)
			}
		}
		ch <- prometheus.MustNewConstMetric(standbysDesc, prometheus.GaugeValue, float64(len(info.Standbys)))
		ch <- prometheus.MustNewConstMetric(syncDesc, prometheus.GaugeValue, float64(info.Synchronous))
	}
	for i, reason := range readErrorReasons {
		ch <- prometheus.MustNewConstMetric(readErrorsDesc, prometheus.CounterValue, float64(c.errors[i].Load()), reason)
	}
}

// readErrorIndex is the index in readErrorReasons of why a read failed.
func readErrorIndex(err error) int {
	switch {
	case errors.Is(err, idem.ErrStandby):
		return 0
	case errors.Is(err, idemadmin.ErrReplicationHidden):
		return 1
	}
	return 2
}
