package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/payments/internal/payer"
	"github.com/idemgen/idemgen/examples/payments/payclient"
)

// refundIntent is one refund a client wants made exactly once. Several are
// sent at once for one payment, under different keys, asking together for
// more than the payment: the service must refuse what exceeds it.
type refundIntent struct {
	id      string
	key     string
	account string
	payment int64 // the payment's id
	amount  int64

	attempts int
	status   int    // terminal status: 201, or 409 with a business problem
	problem  string // the business problem type of a terminal 409
	bodies   [][]byte
	last     string
}

// refundBurst makes n refund intents of the payment in, each for 40% of its
// amount (plus i minor units), sent concurrently: at most two of them can
// succeed. The amounts differ so that the burst is n requests, as n
// customers' intents would be: one request sent under several keys at once
// is what a client that mints a key per attempt sends, and the alert on
// that (IdemgenKeyMintedPerAttempt) would rightly fire.
func (r *run) refundBurst(in *intent, n int, deadline time.Time, rng *rand.Rand) []*refundIntent {
	var p struct {
		ID int64 `json:"id"`
	}
	if len(in.bodies) == 0 || json.Unmarshal(in.bodies[0], &p) != nil || p.ID == 0 {
		return nil
	}
	refunds := make([]*refundIntent, n)
	for i := range refunds {
		refunds[i] = &refundIntent{id: fmt.Sprintf("%s-r%d", in.id, i), key: fmt.Sprintf("%s-r%d-%016x", in.id, i, rng.Uint64()),
			account: in.account, payment: p.ID, amount: in.amount*2/5 + int64(i)}
	}
	var wg sync.WaitGroup
	for _, rf := range refunds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.refund(rf, deadline)
		}()
	}
	wg.Wait()
	return refunds
}

// businessProblem returns the type of a refusal the payments service made
// (urn:payments:problem:...), or "".
func businessProblem(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) == nil && strings.HasPrefix(p.Type, "urn:payments:") {
		return p.Type
	}
	return ""
}

// refund makes one refund intent through the generated client, which
// retries under the intent's key until a terminal answer: 201, or a
// business refusal (a 409 without Retry-After, such as too-much). Then it
// asks once more: the answer must be the same bytes, replayed.
func (r *run) refund(rf *refundIntent, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	c := r.client(false)
	body := payclient.NewRefund{PaymentId: rf.payment, Amount: rf.amount}
	auth := payer.Bearer(rf.account)
	resp, res, err := c.CreateRefund(ctx, rf.key, body, auth)
	rf.attempts += res.Attempts
	switch {
	case err != nil:
		rf.last = "error: " + err.Error()
		return
	case resp.StatusCode() != 201 && !(resp.StatusCode() == 409 && businessProblem(resp.Body) != ""):
		rf.last = fmt.Sprintf("unexpected %d %s", resp.StatusCode(), bytes.TrimSpace(resp.Body))
		return
	}
	if res.Replayed {
		r.replays.Add(1)
	}
	rf.status, rf.problem = resp.StatusCode(), businessProblem(resp.Body)
	rf.bodies = append(rf.bodies, resp.Body)
	rf.last = strconv.Itoa(rf.status)
	r.answer()
	again, res, err := c.CreateRefund(ctx, rf.key, body, auth)
	rf.attempts += res.Attempts
	if err != nil || again.StatusCode() != rf.status {
		return
	}
	r.replays.Add(1)
	rf.bodies = append(rf.bodies, again.Body)
	if !res.Replayed {
		rf.last = "verification answer not marked replayed"
	}
}

// refundTruth is what the database says of one payment's refunds.
type refundTruth struct {
	amount, refunded int64
	rows             int
}

// collectRefunds reads every payment's amount and its refunds.
func collectRefunds(ctx context.Context, dbURL string) (map[int64]refundTruth, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT p.id, p.amount, coalesce(sum(r.amount), 0)::bigint, count(r.id)
FROM payments p LEFT JOIN refunds r ON r.account = p.account AND r.payment_id = p.id GROUP BY p.account, p.id, p.amount`)
	if err != nil {
		return nil, err
	}
	truth := map[int64]refundTruth{}
	for rows.Next() {
		var id int64
		var t refundTruth
		if err := rows.Scan(&id, &t.amount, &t.refunded, &t.rows); err != nil {
			return nil, err
		}
		truth[id] = t
	}
	return truth, rows.Err()
}

// judgeRefunds checks every refund intent against the database: each got a
// terminal answer and the same bytes on replay, the refunds that succeeded
// are exactly the payment's refund rows, and no payment is refunded beyond
// its amount.
func (r *run) judgeRefunds(truth map[int64]refundTruth, all []*refundIntent) {
	rep := &r.report
	problem := func(kind string, rf *refundIntent, format string, args ...any) {
		switch kind {
		case "dup":
			rep.Duplicates++
		case "loss":
			rep.Losses++
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s key=%s payment=%d amount=%d attempts=%d last=%q: %s",
			rf.id, rf.key, rf.payment, rf.amount, rf.attempts, rf.last, fmt.Sprintf(format, args...)))
	}
	succeeded := map[int64]int{}
	byPayment := map[int64]*refundIntent{}
	for _, rf := range all {
		rep.Refunds++
		byPayment[rf.payment] = rf
		switch {
		case rf.status == 0:
			problem("loss", rf, "no terminal answer")
			continue
		case rf.status == 201:
			rep.RefundsSucceeded++
			succeeded[rf.payment]++
		}
		for _, b := range rf.bodies[1:] {
			if !bytes.Equal(b, rf.bodies[0]) {
				problem("dup", rf, "two different answers: %s / %s", rf.bodies[0], b)
				break
			}
		}
		if rf.last == "verification answer not marked replayed" {
			problem("", rf, "the verification retry was not marked Idempotent-Replayed")
		}
	}
	for id, rf := range byPayment {
		t := truth[id]
		switch {
		case t.refunded > t.amount:
			rep.OverRefunded++
			problem("", rf, "payment %d of %d refunded %d in all", id, t.amount, t.refunded)
		case t.rows > succeeded[id]:
			problem("dup", rf, "payment %d has %d refund rows for %d refunds answered 201", id, t.rows, succeeded[id])
		case t.rows < succeeded[id]:
			problem("loss", rf, "payment %d has %d refund rows for %d refunds answered 201", id, t.rows, succeeded[id])
		}
	}
}
