package idem

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The statements the engine sends on every keyed request of the record-last
// path (the read of the key, and the record's insert with COMMIT) go to
// pgconn directly, with their parameters encoded here into a pooled buffer,
// when the pool prepares statements (pgx's default query mode, see
// queries.named). pgx's own path boxes every argument, plans its encoding,
// and runs a batch through its pipeline bookkeeping: about half the
// allocations of a keyed request and much of the engine's CPU time
// (docs/performance.md). The messages on the wire are the same.
//
// pgx calls its tracers (pgx.QueryTracer, pgx.BatchTracer) for what it
// sends; here the engine calls the pool's tracer itself, with the same data,
// so that tracing and statement logging see every statement as before.

// params is one statement's parameters for pgconn: in text format, except
// bytea, sent in binary as it is. Values are copied into buf, so the
// caller's strings and slices are not retained.
type params struct {
	buf  []byte
	ends []int // where each value ends in buf; -1 for NULL
	vals [][]byte
	fmts []int16
	// traced: keep the values as given in args, for a tracer. Only then
	// are they boxed.
	traced bool
	args   []any
}

var paramsPool = sync.Pool{New: func() any { return &params{buf: make([]byte, 0, 512)} }}

func getParams(traced bool) *params {
	p := paramsPool.Get().(*params)
	p.traced = traced
	return p
}

func putParams(p *params) {
	if cap(p.buf) > 64<<10 { // a large response body: let it go
		return
	}
	clear(p.args)
	p.buf, p.ends, p.fmts, p.args = p.buf[:0], p.ends[:0], p.fmts[:0], p.args[:0]
	clear(p.vals)
	p.vals = p.vals[:0]
	paramsPool.Put(p)
}

// add records the value just appended to buf; -1 for NULL.
func (p *params) add(format int16, null bool) {
	end := len(p.buf)
	if null {
		end = -1
	}
	p.ends = append(p.ends, end)
	p.fmts = append(p.fmts, format)
}

func (p *params) text(s string) {
	p.buf = append(p.buf, s...)
	p.add(0, false)
	if p.traced {
		p.args = append(p.args, s)
	}
}

// headers is a JSON parameter: h, as appendHeaderJSON writes it.
func (p *params) headers(h http.Header) {
	start := len(p.buf)
	p.buf = appendHeaderJSON(p.buf, h)
	p.add(0, false)
	if p.traced {
		p.args = append(p.args, p.buf[start:len(p.buf):len(p.buf)])
	}
}

// bytea is a bytea parameter, in binary; nil is NULL.
func (p *params) bytea(b []byte) {
	p.buf = append(p.buf, b...)
	p.add(1, b == nil)
	if p.traced {
		p.args = append(p.args, b)
	}
}

func (p *params) int(n int64) {
	p.buf = strconv.AppendInt(p.buf, n, 10)
	p.add(0, false)
	if p.traced {
		p.args = append(p.args, n)
	}
}

func (p *params) bool(v bool) {
	if v {
		p.buf = append(p.buf, 't')
	} else {
		p.buf = append(p.buf, 'f')
	}
	p.add(0, false)
	if p.traced {
		p.args = append(p.args, v)
	}
}

// values returns the encoded values, valid until p is put back.
func (p *params) values() [][]byte {
	start := 0
	for _, end := range p.ends {
		if end < 0 {
			p.vals = append(p.vals, nil)
			continue
		}
		// An empty value is not NULL: it must be a non-nil slice.
		p.vals = append(p.vals, p.buf[start:end:end])
		start = end
	}
	return p.vals
}

// allBinary asks for every result column in binary.
var allBinary = []int16{1}

// readBeginWire is readBegin through pgconn: readHeldSQL's row, decoded
// from binary, and BEGIN, which the server skips when the read found one.
func (q queries) readBeginWire(ctx context.Context, conn *pgx.Conn, ns, scope, key string) (*record, error) {
	read, err := conn.Prepare(ctx, q.readHeldSQL, q.readHeldSQL)
	if err != nil {
		return nil, err
	}
	begin, err := conn.Prepare(ctx, beginSQL, beginSQL)
	if err != nil {
		return nil, err
	}
	traced := q.batchTracer != nil
	p := getParams(traced)
	defer putParams(p)
	p.text(ns)
	p.text(scope)
	p.text(key)
	b := &pgconn.Batch{}
	b.ExecStatement(read, p.values(), p.fmts, allBinary)
	b.ExecStatement(begin, nil, nil, nil)
	if traced {
		tb := &pgx.Batch{}
		tb.Queue(q.readHeldSQL, p.args...)
		tb.Queue(beginSQL)
		ctx = q.batchTracer.TraceBatchStart(ctx, conn, pgx.TraceBatchStartData{Batch: tb})
	}
	mrr := conn.PgConn().ExecBatch(ctx, b)
	var rec *record
	var derr, first error
	for i := 0; mrr.NextResult(); i++ {
		rr := mrr.ResultReader()
		if i == 0 && rr.NextRow() {
			rec, derr = decodeRecord(rr.Values())
		}
		for rr.NextRow() {
		}
		tag, err := rr.Close()
		if first == nil {
			first = err
		}
		if traced {
			sql, args := beginSQL, []any(nil)
			if i == 0 {
				sql, args = q.readHeldSQL, p.args
			}
			q.batchTracer.TraceBatchQuery(ctx, conn, pgx.TraceBatchQueryData{SQL: sql, Args: args, CommandTag: tag, Err: err})
		}
	}
	if err := mrr.Close(); first == nil {
		first = err
	}
	if traced {
		q.batchTracer.TraceBatchEnd(ctx, conn, pgx.TraceBatchEndData{Err: first})
	}
	return held(rec, derr, first)
}

// errColumn is a result that is not what readSQL returns.
var errColumn = errors.New("idem: unexpected column in the record's row")

// decodeRecord decodes a row of readSQL in binary format, copying what it
// keeps.
func decodeRecord(v [][]byte) (*record, error) {
	if len(v) != 14 {
		return nil, fmt.Errorf("%w: %d columns, want 14", errColumn, len(v))
	}
	r := &record{
		operation:     string(v[0]),
		fingerprint:   clone(v[1]),
		state:         string(v[2]),
		recovery:      string(v[8]),
		phaseState:    clone(v[9]),
		body:          clone(v[12]),
		live:          len(v[4]) == 1 && v[4][0] == 1,
		pastRetention: len(v[6]) == 1 && v[6][0] == 1,
		bodyOmitted:   len(v[13]) == 1 && v[13][0] == 1,
	}
	if v[3] != nil {
		if len(v[3]) != 16 {
			return nil, fmt.Errorf("%w: owner token of %d bytes", errColumn, len(v[3]))
		}
		r.owner = (*[16]byte)(clone(v[3]))
	}
	secs, err := float8(v[5])
	if err != nil {
		return nil, err
	}
	expires, err := float8(v[7])
	if err != nil {
		return nil, err
	}
	if v[10] != nil {
		if len(v[10]) != 2 {
			return nil, fmt.Errorf("%w: status of %d bytes", errColumn, len(v[10]))
		}
		status := int(int16(binary.BigEndian.Uint16(v[10])))
		r.status = &status
	}
	if v[11] != nil {
		if err := json.Unmarshal(v[11], &r.headers); err != nil {
			return nil, fmt.Errorf("idem: decoding stored headers: %w", err)
		}
	}
	r.setTimes(secs, expires)
	return r, nil
}

func float8(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: float8 of %d bytes", errColumn, len(b))
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
}

// clone copies b, keeping nil (NULL) apart from empty.
func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// sendBatch sends stmts (each prepared on conn) in one round trip and ends
// at the first error, which it returns: the later statements were skipped
// by the server. args[i] are stmts[i]'s encoded parameters (nil for none).
func (q queries) sendBatch(ctx context.Context, conn *pgx.Conn, sqls []string, args []*params) error {
	b := &pgconn.Batch{}
	for i, sql := range sqls {
		sd, err := conn.Prepare(ctx, sql, sql)
		if err != nil {
			return err
		}
		if p := args[i]; p != nil {
			b.ExecStatement(sd, p.values(), p.fmts, nil)
		} else {
			b.ExecStatement(sd, nil, nil, nil)
		}
	}
	traced := q.batchTracer != nil
	if traced {
		tb := &pgx.Batch{}
		for i, sql := range sqls {
			if p := args[i]; p != nil {
				tb.Queue(sql, p.args...)
			} else {
				tb.Queue(sql)
			}
		}
		ctx = q.batchTracer.TraceBatchStart(ctx, conn, pgx.TraceBatchStartData{Batch: tb})
	}
	mrr := conn.PgConn().ExecBatch(ctx, b)
	var first error
	for i := 0; mrr.NextResult(); i++ {
		tag, err := mrr.ResultReader().Close()
		if first == nil {
			first = err
		}
		if traced && i < len(sqls) {
			var targs []any
			if args[i] != nil {
				targs = args[i].args
			}
			q.batchTracer.TraceBatchQuery(ctx, conn, pgx.TraceBatchQueryData{SQL: sqls[i], Args: targs, CommandTag: tag, Err: err})
		}
	}
	err := mrr.Close()
	if first == nil {
		first = err
	}
	if traced {
		q.batchTracer.TraceBatchEnd(ctx, conn, pgx.TraceBatchEndData{Err: first})
	}
	return first
}

// commitLastWire is commitLast's batch through pgconn.
func (q queries) commitLastWire(ctx context.Context, conn *pgx.Conn, c *claim, phase string, resp *Response,
	body []byte, omitted bool) error {
	p := getParams(q.batchTracer != nil)
	defer putParams(p)
	p.text(c.ns)
	p.text(c.scope)
	p.text(c.key)
	p.text(c.op.ID)
	p.bytea(c.fingerprint)
	p.text(phase)
	p.int(int64(resp.Status))
	p.headers(resp.Header)
	p.bytea(body)
	p.bool(omitted)
	p.int(micros(c.policy.Retention))
	p.int(int64(c.derivation))
	p.text(q.claimWait)
	return q.sendBatch(ctx, conn, []string{q.insertCompletedSQL, commit}, []*params{p, nil})
}
