package idem

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// The statements the engine sends on every keyed request of the record-last
// path (the read of the key, and the record's insert with COMMIT) go to
// pgconn directly, with their parameters encoded here into a pooled buffer,
// when the pool prepares statements (pgx's default query mode, see
// queries.named). pgx's own path boxes every argument, plans its encoding,
// and runs a batch through its pipeline bookkeeping: about 40 allocations
// of a keyed request, and CPU time (docs/performance.md). The messages on the wire are the same.
//
// pgx calls its tracers (pgx.QueryTracer, pgx.BatchTracer) for what it
// sends; here the engine calls the pool's tracer itself, with the same data,
// so that tracing and statement logging see every statement as before.

// params is one statement's parameters for pgconn: in text format, except
// bytea and uuid, sent in binary as they are. Values are copied into buf,
// so the caller's strings and slices are not retained.
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
	if p.traced || cap(p.buf) > 64<<10 {
		// A tracer may keep the arguments, which alias buf; a large
		// response body is let go.
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

// headers is a bytea parameter, in binary: h, as appendHeaders codes it.
func (p *params) headers(h http.Header) {
	start := len(p.buf)
	p.buf = appendHeaders(p.buf, h)
	p.add(1, false)
	if p.traced {
		p.args = append(p.args, p.buf[start:len(p.buf):len(p.buf)])
	}
}

// uuid is a uuid parameter, in binary.
func (p *params) uuid(id [16]byte) {
	p.buf = append(p.buf, id[:]...)
	p.add(1, false)
	if p.traced {
		p.args = append(p.args, id)
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

// readConn is read on an acquired connection, through pgconn when the
// engine may prepare statements.
func (q queries) readConn(ctx context.Context, conn *pgx.Conn, id [16]byte) (*record, error) {
	if !q.named {
		return q.read(ctx, conn, id)
	}
	sd, err := conn.Prepare(ctx, q.readSQL, q.readSQL)
	if err != nil {
		return nil, err
	}
	traced := q.queryTracer != nil
	p := getParams(traced)
	defer putParams(p)
	p.uuid(id)
	if traced {
		ctx = q.queryTracer.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: q.readSQL, Args: p.args})
	}
	rr := conn.PgConn().ExecStatement(ctx, sd, p.values(), p.fmts, allBinary)
	var rec *record
	var derr error
	if rr.NextRow() {
		rec, derr = decodeRecord(rr.Values())
	}
	tag, err := rr.Close()
	if err == nil {
		err = derr
	}
	if traced {
		q.queryTracer.TraceQueryEnd(ctx, conn, pgx.TraceQueryEndData{CommandTag: tag, Err: err})
	}
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, pgx.ErrNoRows
	}
	return rec, nil
}

// errColumn is a result that is not what readSQL returns.
var errColumn = errors.New("idem: unexpected column in the record's row")

// decodeRecord decodes a row of readSQL in binary format, copying what it
// keeps.
func decodeRecord(v [][]byte) (*record, error) {
	if len(v) != 14 {
		return nil, fmt.Errorf("%w: %d columns, want 14", errColumn, len(v))
	}
	headers, err := parseHeaders(v[11])
	if err != nil {
		return nil, err
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
		headers:       headers,
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
	if b := v[10]; b != nil {
		if len(b) != 2 {
			return nil, fmt.Errorf("%w: status of %d bytes", errColumn, len(b))
		}
		status := int(int16(binary.BigEndian.Uint16(b)))
		r.status = &status
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

// sendBatch sends sqls (each prepared on conn by name) in one round trip;
// args[i] are sqls[i]'s encoded parameters (nil for none). It returns the
// first error, after which the server skipped the rest of the batch.
//
// Its statements return no rows, so it writes their messages through the
// connection's own protocol buffer (pgconn's Frontend) and reads the
// answers one by one (PgConn.ReceiveMessage), which pgconn offers for
// exactly this: no batch, result reader or command tag is allocated. pgconn
// still sees every message (the transaction status, notices, OnPgError).
// Should the round trip break off (a network error, ctx done) with answers
// unread, the connection is closed, so that the pool drops it.
func (q queries) sendBatch(ctx context.Context, conn *pgx.Conn, sqls []string, args []*params) error {
	var sds [4]*pgconn.StatementDescription
	if len(sqls) > len(sds) {
		return fmt.Errorf("idem: a batch of %d statements", len(sqls))
	}
	for i, sql := range sqls { // before any message of the batch is buffered
		sd, err := conn.Prepare(ctx, sql, sql)
		if err != nil {
			return err
		}
		sds[i] = sd
	}
	var tr *batchTrace
	if q.batchTracer != nil {
		traced := make([][]any, len(args))
		for i, p := range args {
			if p != nil {
				traced[i] = p.args
			}
		}
		tr = q.traceBatch(ctx, conn, sqls, traced)
		ctx = tr.ctx
	}
	pc := conn.PgConn()
	if pc.IsBusy() || pc.IsClosed() {
		err := errors.New("idem: connection busy or closed")
		tr.end(err)
		return err
	}
	fe := pc.Frontend()
	for i := range sqls {
		bind := pgproto3.Bind{PreparedStatement: sds[i].Name}
		if p := args[i]; p != nil {
			bind.Parameters, bind.ParameterFormatCodes = p.values(), p.fmts
		}
		fe.SendBind(&bind)
		fe.SendExecute(&pgproto3.Execute{})
	}
	fe.SendSync(&pgproto3.Sync{})
	if err := fe.Flush(); err != nil {
		abandon(pc)
		tr.end(err)
		return err
	}
	var first error
	tr.reading()
	for {
		msg, err := pc.ReceiveMessage(ctx)
		if err != nil {
			abandon(pc)
			if first == nil {
				first = err
			}
			tr.end(first)
			return first
		}
		switch msg := msg.(type) {
		case *pgproto3.CommandComplete:
			if tr != nil {
				tr.query(pgconn.NewCommandTag(string(msg.CommandTag)), nil)
				tr.reading()
			}
		case *pgproto3.ErrorResponse:
			if first == nil {
				first = pgconn.ErrorResponseToPgError(msg)
				tr.query(pgconn.CommandTag{}, first)
			}
		case *pgproto3.ReadyForQuery:
			tr.end(first)
			return first
		}
	}
}

// abandon closes a connection whose round trip broke off with answers
// unread: it cannot be used again.
func abandon(pc *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	pc.Close(ctx)
}

// batchTrace reports a batch the engine sends through pgconn to the pool's
// tracer, as pgx reports the batches it sends. Its methods do nothing on a
// nil batchTrace (no tracer).
type batchTrace struct {
	tracer pgx.BatchTracer
	ctx    context.Context
	conn   *pgx.Conn
	sqls   []string
	args   [][]any
	next   int       // the statement whose result comes next
	start  time.Time // when reading its result began
	failed bool      // a statement was reported with an error
}

// traceBatch starts reporting a batch of sqls with args to the pool's batch
// tracer, which must be set.
func (q queries) traceBatch(ctx context.Context, conn *pgx.Conn, sqls []string, args [][]any) *batchTrace {
	tb := &pgx.Batch{}
	for i, sql := range sqls {
		tb.Queue(sql, args[i]...)
	}
	ctx = q.batchTracer.TraceBatchStart(ctx, conn, pgx.TraceBatchStartData{Batch: tb})
	return &batchTrace{tracer: q.batchTracer, ctx: ctx, conn: conn, sqls: sqls, args: args}
}

func (t *batchTrace) reading() {
	if t != nil {
		t.start = time.Now()
	}
}

func (t *batchTrace) query(tag pgconn.CommandTag, err error) {
	if t == nil || t.next >= len(t.sqls) {
		return
	}
	t.tracer.TraceBatchQuery(t.ctx, t.conn, pgx.TraceBatchQueryData{SQL: t.sqls[t.next], Args: t.args[t.next],
		CommandTag: tag, Err: err, ReadStartTime: t.start})
	t.next++
	t.failed = t.failed || err != nil
}

// end reports a statement that failed before it sent a result (a unique
// violation on an insert), then the batch's end. The statements the server
// skipped after the failure are not reported, as pgx does not.
func (t *batchTrace) end(err error) {
	if t == nil {
		return
	}
	if err != nil && !t.failed {
		t.query(pgconn.CommandTag{}, err)
	}
	t.tracer.TraceBatchEnd(t.ctx, t.conn, pgx.TraceBatchEndData{Err: err})
}

// commitLastWire is commitLast's batch through pgconn.
func (q queries) commitLastWire(ctx context.Context, conn *pgx.Conn, begin bool, c *claim, resp *Response,
	body []byte, omitted bool) error {
	p := getParams(q.batchTracer != nil)
	defer putParams(p)
	p.uuid(c.id)
	p.bytea(receiptFingerprint(c.op.ID, c.fingerprint))
	p.int(int64(resp.Status))
	p.headers(resp.Header)
	p.bytea(body)
	p.bool(omitted)
	p.int(micros(c.policy.Retention))
	p.text(q.claimWait)
	if begin { // the phases sent no statement
		return q.sendBatch(ctx, conn, []string{beginSQL, q.insertCompletedSQL, commit}, []*params{nil, p, nil})
	}
	return q.sendBatch(ctx, conn, []string{q.insertCompletedSQL, commit}, []*params{p, nil})
}
