package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/payments/cardnet"
)

// checkWebhooks waits for the card network to deliver every event it made
// (each until a 2xx, plus the deliberate second deliveries), then counts
// the service's card_events rows per event: each event must be applied
// exactly once.
func (r *run) checkWebhooks(ctx context.Context) {
	rep := &r.report
	events, err := r.settledEvents(ctx)
	if err != nil {
		rep.Problems = append(rep.Problems, "checker: webhooks: "+err.Error())
		return
	}
	applied, err := appliedEvents(ctx, r.dbURL)
	if err != nil {
		rep.Problems = append(rep.Problems, "checker: card_events: "+err.Error())
		return
	}
	r.judgeWebhooks(events, applied)
}

// settledEvents polls the card network's GET /events until every event is
// done, or until none got done for 20s (an event that can never be applied
// is then reported as missing), at most 5 minutes.
func (r *run) settledEvents(ctx context.Context) ([]cardnet.EventStatus, error) {
	lastDone, lastChange := -1, time.Now()
	for end := time.Now().Add(5 * time.Minute); ; {
		events, err := r.cardEvents(ctx)
		if err != nil {
			return nil, err
		}
		done := 0
		for _, e := range events {
			if e.Done {
				done++
			}
		}
		if done != lastDone {
			lastDone, lastChange = done, time.Now()
		}
		if done == len(events) || time.Since(lastChange) > 20*time.Second || time.Now().After(end) {
			if done < len(events) {
				r.say("webhooks: %d of %d events still undelivered; checking anyway", len(events)-done, len(events))
			}
			return events, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (r *run) cardEvents(ctx context.Context) ([]cardnet.EventStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return r.cardClient().Events(ctx)
}

// appliedEvents counts the card_events rows of each event id.
func appliedEvents(ctx context.Context, dbURL string) (map[string]int, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT event_id, count(*) FROM card_events GROUP BY event_id`)
	if err != nil {
		return nil, err
	}
	applied := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		applied[id] = n
	}
	return applied, rows.Err()
}

// judgeWebhooks compares the events the card network sent with the rows
// the service wrote: one row per event, none for an event never sent; and
// every deliberate second delivery answered 2xx must be a replay.
func (r *run) judgeWebhooks(events []cardnet.EventStatus, applied map[string]int) {
	rep := &r.report
	problem := func(e cardnet.EventStatus, format string, args ...any) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("webhook %s %s charge=%s deliveries=%d: %s",
			e.Event.ID, e.Event.Type, e.Event.Charge.ID, len(e.Deliveries), fmt.Sprintf(format, args...)))
	}
	sent := map[string]bool{}
	for _, e := range events {
		sent[e.Event.ID] = true
		rep.WebhookEvents++
		rep.WebhookDeliveries += len(e.Deliveries)
		for _, d := range e.Deliveries {
			if d.Duplicate && d.Status >= 200 && d.Status <= 299 {
				rep.WebhookDuplicatesSent++
				if !d.Replayed {
					problem(e, "the deliberate second delivery was answered %d without Idempotent-Replayed", d.Status)
				}
			}
			if d.Replayed {
				rep.WebhookReplays++
			}
		}
		switch n := applied[e.Event.ID]; {
		case n > 1:
			rep.WebhookAppliedTwice++
			problem(e, "applied %d times", n)
		case n == 0:
			rep.WebhookMissing++
			last := "no attempt"
			if k := len(e.Deliveries); k > 0 {
				d := e.Deliveries[k-1]
				last = fmt.Sprintf("%d %s%s", d.Status, d.Err, d.Answer)
			}
			problem(e, "never applied (last delivery: %s)", last)
		}
	}
	for id, n := range applied {
		if !sent[id] {
			rep.WebhookAppliedTwice++
			rep.Problems = append(rep.Problems, fmt.Sprintf("webhook %s: applied %d times, but the card network never sent it", id, n))
		}
	}
}
