// Package outbox delivers the payments example's receipt emails exactly once
// per payment. The outbox row, written in the same transaction as the
// payment's success, is the dedup record: a relay locks undelivered rows,
// hands each to the mail sink under the row's id, and marks it delivered. A
// relay that dies between the sink and the mark leaves the row undelivered;
// the next relay hands it over again, and the sink, which remembers ids,
// ignores the repeat.
package outbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Mail is one delivered email, one JSON line in the sink file.
type Mail struct {
	OutboxID int64     `json:"outbox_id"`
	To       string    `json:"to"`
	Subject  string    `json:"subject"`
	Body     string    `json:"body"`
	SentAt   time.Time `json:"sent_at"`
}

// Sink is a mailbox file shared safely by many processes: Deliver holds an
// exclusive lock on the file, catches up with what other processes appended
// since its last call, and appends only ids it has not seen. Each call reads
// only the new part of the file.
type Sink struct {
	Path string

	mu     sync.Mutex
	seen   map[int64]bool
	offset int64 // bytes of the file already indexed in seen
}

// Deliver appends m unless a mail with its OutboxID is already in the file.
// It reports whether it appended.
func (s *Sink) Deliver(m Mail) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.OpenFile(s.Path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return false, err
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if s.seen == nil {
		s.seen = map[int64]bool{}
	}
	if _, err := f.Seek(s.offset, io.SeekStart); err != nil {
		return false, err
	}
	tail, err := io.ReadAll(f)
	if err != nil {
		return false, err
	}
	for len(tail) > 0 {
		i := bytes.IndexByte(tail, '\n')
		if i < 0 {
			// A torn last line from a writer that died mid-write: end it,
			// so the next mail starts on a line of its own.
			if _, err := f.Write([]byte("\n")); err != nil {
				return false, err
			}
			s.offset += int64(len(tail)) + 1
			break
		}
		var old Mail
		if json.Unmarshal(tail[:i], &old) == nil {
			s.seen[old.OutboxID] = true
		}
		s.offset += int64(i) + 1
		tail = tail[i+1:]
	}
	if s.seen[m.OutboxID] {
		return false, nil
	}
	line, _ := json.Marshal(m)
	line = append(line, '\n')
	if _, err := f.Write(line); err != nil {
		return false, err
	}
	if err := f.Sync(); err != nil {
		return false, err
	}
	s.seen[m.OutboxID] = true
	s.offset += int64(len(line))
	return true, nil
}

// Mails returns every mail in the sink.
func (s *Sink) Mails() ([]Mail, error) {
	f, err := os.Open(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return read(f)
}

// WaitMails waits for the relays, which deliver in the background, to put
// at least want mails in the sink, and returns what the sink holds then. It
// gives up, returning what is there, once idle passed without a new mail or
// ctx is done: the caller judges the count.
func (s *Sink) WaitMails(ctx context.Context, want int, idle time.Duration) ([]Mail, error) {
	last, lastChange := -1, time.Now()
	for {
		mails, err := s.Mails()
		if err != nil {
			return nil, err
		}
		if len(mails) != last {
			last, lastChange = len(mails), time.Now()
		}
		if len(mails) >= want || time.Since(lastChange) > idle {
			return mails, nil
		}
		select {
		case <-ctx.Done():
			return mails, nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func read(r io.ReadSeeker) ([]Mail, error) {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	var out []Mail
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m Mail
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue // a torn last line from a crash mid-write
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// Relay moves undelivered outbox rows to the sink.
type Relay struct {
	Pool *pgxpool.Pool
	Sink *Sink
	Log  *slog.Logger
}

// RunOnce delivers up to batch undelivered rows and returns how many it
// marked delivered. Rows locked by another relay are skipped.
//
// The rows are taken account by account: first the accounts with rows
// to deliver, the longest waiting first (a read that locks nothing), then
// each account's share of the batch in a transaction of its own, locked
// with SKIP LOCKED, so that an account with much mail waiting does not
// hold back the others. On Citus, where the
// outbox is distributed by account, a statement that locks rows must name
// its shard's account: SELECT ... FOR UPDATE across shards is refused. On
// one PostgreSQL it costs a statement per account with mail waiting.
func (r *Relay) RunOnce(ctx context.Context, batch int) (int, error) {
	rows, err := r.Pool.Query(ctx, `SELECT account FROM outbox WHERE delivered_at IS NULL GROUP BY account ORDER BY min(id) LIMIT $1`, batch)
	if err != nil {
		return 0, err
	}
	accounts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	n := 0
	share := (batch + len(accounts) - 1) / max(1, len(accounts))
	for _, acct := range accounts {
		if n >= batch {
			break
		}
		m, err := r.runAccount(ctx, acct, min(share, batch-n))
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// runAccount delivers up to batch of acct's undelivered rows.
func (r *Relay) runAccount(ctx context.Context, acct string, batch int) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, recipient, subject, body FROM outbox
WHERE account = $1 AND delivered_at IS NULL ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`, acct, batch)
		if err != nil {
			return err
		}
		mails, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Mail, error) {
			var m Mail
			return m, row.Scan(&m.OutboxID, &m.To, &m.Subject, &m.Body)
		})
		if err != nil {
			return err
		}
		for _, m := range mails {
			m.SentAt = time.Now().UTC()
			if _, err := r.Sink.Deliver(m); err != nil {
				return fmt.Errorf("outbox: delivering %d: %w", m.OutboxID, err)
			}
			if _, err := tx.Exec(ctx, `UPDATE outbox SET delivered_at = now() WHERE account = $1 AND id = $2`, acct, m.OutboxID); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err // rolled back: nothing marked
	}
	return n, nil
}

// Run relays every interval until ctx ends.
func (r *Relay) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := r.RunOnce(ctx, 100); err != nil && ctx.Err() == nil && r.Log != nil {
			r.Log.Warn("outbox relay", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
