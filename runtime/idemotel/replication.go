package idemotel

import (
	"context"
	"errors"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
)

// ObserveReplication reports the replication of the primary that db (the
// engine's pool) reaches, read from its pg_stat_replication at each
// collection by idemadmin.Replication (one statement, at most
// idemadmin.ReplicationTimeout), as idemprom.NewReplicationCollector does:
//
//	idemgen.replication.lag{standby,stage}  gauge (s), as idemgen_replication_lag_seconds
//	idemgen.replication.standbys            gauge, as idemgen_replication_standbys
//	idemgen.replication.sync_standbys       gauge, as idemgen_replication_sync_standbys
//	idemgen.replication.read_errors{reason} counter, as idemgen_replication_read_errors_total
//
// A collection that cannot read them (a standby, a role without
// pg_monitor, the primary unreachable) observes only the counter and does
// not fail. Unregister the returned registration to stop.
func ObserveReplication(mp metric.MeterProvider, db idem.Querier) (metric.Registration, error) {
	m := mp.Meter(ScopeName)
	lag, err := m.Float64ObservableGauge("idemgen.replication.lag", metric.WithUnit("s"),
		metric.WithDescription("Replication lag of each standby of the store's primary, by stage: write, flush (what a failover to it keeps) and replay; 0 while it is caught up and no WAL is written."))
	if err != nil {
		return nil, err
	}
	standbys, err := m.Int64ObservableGauge("idemgen.replication.standbys",
		metric.WithDescription("Standbys streaming from the store's primary."))
	if err != nil {
		return nil, err
	}
	syncs, err := m.Int64ObservableGauge("idemgen.replication.sync_standbys",
		metric.WithDescription("Standbys whose acknowledgement the primary's commits wait for (sync_state sync or quorum): a failover to one of them loses nothing acknowledged."))
	if err != nil {
		return nil, err
	}
	readErrors, err := m.Int64ObservableCounter("idemgen.replication.read_errors",
		metric.WithDescription("Collections that could not read the store's replication, by reason: standby, privilege (grant pg_monitor), error."))
	if err != nil {
		return nil, err
	}
	var counts [3]atomic.Int64 // by reasons
	reasons := []string{"standby", "privilege", "error"}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		info, err := idemadmin.Replication(ctx, db)
		switch {
		case errors.Is(err, idem.ErrStandby):
			counts[0].Add(1)
		case errors.Is(err, idemadmin.ErrReplicationHidden):
			counts[1].Add(1)
		case err != nil:
			counts[2].Add(1)
		default:
			for name, l := range info.Lags() {
				for i, stage := range []string{"write", "flush", "replay"} {
					o.ObserveFloat64(lag, l[i].Seconds(), metric.WithAttributes(attribute.String("standby", name), attribute.String("stage", stage)))
				}
			}
			o.ObserveInt64(standbys, int64(len(info.Standbys)))
			o.ObserveInt64(syncs, int64(info.Synchronous))
		}
		for i, r := range reasons {
			o.ObserveInt64(readErrors, counts[i].Load(), metric.WithAttributes(attribute.String("reason", r)))
		}
		return nil
	}, lag, standbys, syncs, readErrors)
}
