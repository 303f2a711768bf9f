package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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
// amount, sent concurrently: at most two of them can succeed.
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
			account: in.account, payment: p.ID, amount: in.amount * 2 / 5}
	}
	var wg sync.WaitGroup
	for i, rf := range refunds {
		own := rand.New(rand.NewPCG(rng.Uint64(), uint64(i))) // drawn here: rng is this client's alone
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.refund(rf, deadline, own)
		}()
	}
	wg.Wait()
	return refunds
}

// post makes one attempt of a request with a plain client.
func (r *run) post(path, account, key string, body []byte) answer {
	req, _ := http.NewRequest("POST", "http://"+r.front.addr+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+account)
	req.Header.Set("Idempotency-Key", key)
	res, err := (&http.Client{Timeout: 8 * time.Second}).Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, body: b, err: err, replayed: res.Header.Get("Idempotent-Replayed") == "true"}
	if s, perr := strconv.Atoi(res.Header.Get("Retry-After")); perr == nil {
		a.retryAfter = time.Duration(s) * time.Second
	}
	return a
}

// businessProblem returns the type of a refusal the payments service made
// (urn:payments:problem:...), or "" for anything else, such as the
// idempotency layer's 409 in-flight, which is to be retried.
func businessProblem(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) == nil && len(p.Type) > len("urn:payments:") && p.Type[:len("urn:payments:")] == "urn:payments:" {
		return p.Type
	}
	return ""
}

// refund retries one refund intent until a terminal answer, then checks
// one replay.
func (r *run) refund(rf *refundIntent, deadline time.Time, rng *rand.Rand) {
	body := []byte(fmt.Sprintf(`{"payment_id":%d,"amount":%d}`, rf.payment, rf.amount))
	backoff := 100 * time.Millisecond
	for time.Now().Before(deadline) {
		r.attempts.Add(1)
		rf.attempts++
		a := r.post("/refunds", rf.account, rf.key, body)
		terminal := a.err == nil && (a.status == 201 || (a.status == 409 && businessProblem(a.body) != ""))
		switch {
		case a.err != nil:
			r.resets.Add(1)
			rf.last = "error: " + a.err.Error()
		case terminal:
			if a.replayed {
				r.replays.Add(1)
			}
			rf.status, rf.problem = a.status, businessProblem(a.body)
			rf.bodies = append(rf.bodies, a.body)
			rf.last = strconv.Itoa(a.status)
			r.answered.Add(1)
			for time.Now().Before(deadline) {
				again := r.post("/refunds", rf.account, rf.key, body)
				if again.err == nil && again.status == a.status && businessProblem(again.body) == rf.problem {
					r.replays.Add(1)
					rf.bodies = append(rf.bodies, again.body)
					if !again.replayed {
						rf.last = "verification answer not marked replayed"
					}
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
			return
		case a.status == 409:
			r.conflicts.Add(1)
			rf.last = "409 in flight"
			wait := a.retryAfter
			if wait <= 0 || wait > 5*time.Second {
				wait = time.Second
			}
			time.Sleep(wait/2 + time.Duration(rng.Int64N(int64(wait/2)+1)))
			continue
		case a.status >= 500:
			r.errs5xx.Add(1)
			rf.last = fmt.Sprintf("%d %s", a.status, bytes.TrimSpace(a.body))
		default:
			rf.last = fmt.Sprintf("unexpected %d %s", a.status, bytes.TrimSpace(a.body))
			return
		}
		time.Sleep(backoff + time.Duration(rng.Int64N(int64(backoff))))
		if backoff < 2*time.Second {
			backoff *= 2
		}
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
FROM payments p LEFT JOIN refunds r ON r.payment_id = p.id GROUP BY p.id, p.amount`)
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
