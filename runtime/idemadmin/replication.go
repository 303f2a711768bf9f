package idemadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// ReplicationTimeout is the longest Replication reads, its wait for a
// pooled connection included: a metrics scrape never holds one longer.
const ReplicationTimeout = time.Second

// ErrReplicationHidden is returned by Replication when standbys stream
// from the primary but pg_stat_replication hides their state and lags from
// the role it reads as: only superusers and members of pg_read_all_stats
// (pg_monitor includes it) see them.
var ErrReplicationHidden = errors.New("idemadmin: pg_stat_replication hides the standbys' state from this role: GRANT pg_monitor TO it")

// StandbyInfo is one standby streaming from the store's primary, as the
// primary's pg_stat_replication reports it.
type StandbyInfo struct {
	Name      string // application_name
	State     string // startup, catchup, streaming or stopping
	SyncState string // async, potential, sync or quorum
	// The time between the primary's flush of recent WAL and the
	// standby's report that it wrote, flushed (on its disk: what a
	// failover to it keeps) and replayed it. PostgreSQL clears them while
	// the standby is caught up and no WAL is written: they are 0 then.
	WriteLag, FlushLag, ReplayLag time.Duration
}

// Synchronous reports whether the primary's commits wait for s
// (sync_state sync, or quorum): a failover to it loses nothing
// acknowledged.
func (s StandbyInfo) Synchronous() bool { return s.SyncState == "sync" || s.SyncState == "quorum" }

// ReplicationInfo is the store's primary's replication.
type ReplicationInfo struct {
	Standbys    []StandbyInfo // by name; physical standbys only, no base backup or logical decoding
	Synchronous int           // how many of them are synchronous
}

// Lags are the write, flush and replay lag of the standbys of each name,
// the largest of those that share it (application_name defaults to
// walreceiver): what a gauge per standby exports, since two series of one
// name would fail a scrape.
func (r *ReplicationInfo) Lags() map[string][3]time.Duration {
	lags := map[string][3]time.Duration{}
	for _, s := range r.Standbys {
		l := lags[s.Name]
		for i, d := range []time.Duration{s.WriteLag, s.FlushLag, s.ReplayLag} {
			l[i] = max(l[i], d)
		}
		lags[s.Name] = l
	}
	return lags
}

// replicationSQL reads pg_stat_replication in one row: whether the server
// is a standby, how many walsenders' details it hides, and the standbys.
// Walsenders of a base backup and of logical decoding (a subscription, a
// change-data-capture reader) are not standbys a failover promotes.
const replicationSQL = `SELECT pg_is_in_recovery(), count(*) FILTER (WHERE r.state IS NULL),
	coalesce(json_agg(json_build_object('name', r.application_name, 'state', r.state, 'sync_state', r.sync_state,
		'write', extract(epoch FROM r.write_lag), 'flush', extract(epoch FROM r.flush_lag), 'replay', extract(epoch FROM r.replay_lag))
		ORDER BY r.application_name) FILTER (WHERE r.state IS NOT NULL), '[]')
FROM pg_stat_replication r
WHERE r.state IS DISTINCT FROM 'backup'
	AND NOT EXISTS (SELECT FROM pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_type = 'logical')`

// Replication reads the replication of the primary db reaches from its
// pg_stat_replication, in one statement, for at most ReplicationTimeout.
// On a standby it returns idem.ErrStandby (the engine claims nothing
// there); when the role may not see the standbys' state,
// ErrReplicationHidden. runtime/idemprom and runtime/idemotel export it
// as gauges (docs/operations.md, "Replication lag").
func Replication(ctx context.Context, db idem.Querier) (*ReplicationInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, ReplicationTimeout)
	defer cancel()
	var standby bool
	var hidden int
	var raw []byte
	if err := db.QueryRow(ctx, replicationSQL).Scan(&standby, &hidden, &raw); err != nil {
		return nil, fmt.Errorf("idemadmin: reading pg_stat_replication: %w", err)
	}
	if standby {
		return nil, fmt.Errorf("idemadmin: reading pg_stat_replication: %w", idem.ErrStandby)
	}
	if hidden > 0 {
		return nil, ErrReplicationHidden
	}
	var rows []struct {
		Name, State          string
		SyncState            string `json:"sync_state"`
		Write, Flush, Replay *float64
	}
	if err := json.Unmarshal(raw, &rows); err != nil {
		return nil, fmt.Errorf("idemadmin: reading pg_stat_replication: %w", err)
	}
	info := &ReplicationInfo{Standbys: make([]StandbyInfo, len(rows))}
	for i, r := range rows {
		s := StandbyInfo{Name: r.Name, State: r.State, SyncState: r.SyncState,
			WriteLag: seconds(r.Write), FlushLag: seconds(r.Flush), ReplayLag: seconds(r.Replay)}
		if s.Synchronous() {
			info.Synchronous++
		}
		info.Standbys[i] = s
	}
	return info, nil
}

// seconds is a lag in seconds as a duration; NULL (caught up) is 0.
func seconds(s *float64) time.Duration {
	if s == nil {
		return 0
	}
	return time.Duration(*s * float64(time.Second))
}
