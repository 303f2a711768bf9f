package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemtype"
)

// Reference is what an operation that renders its replays (Policy.Render)
// keeps of its answer's body: the value at each of its JSON Pointers, by
// pointer. A replay renders the representation again from it.
type Reference map[string]json.RawMessage

// Raw is the JSON value at pointer, or nil.
func (r Reference) Raw(pointer string) json.RawMessage { return r[pointer] }

// Decode decodes the value at pointer into v.
func (r Reference) Decode(pointer string, v any) error {
	raw, ok := r[pointer]
	if !ok {
		return fmt.Errorf("idem: the reference has no %s", pointer)
	}
	return json.Unmarshal(raw, v)
}

// String is the string at pointer (a number is given as its digits).
func (r Reference) String(pointer string) (string, error) {
	raw, ok := r[pointer]
	if !ok {
		return "", fmt.Errorf("idem: the reference has no %s", pointer)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", fmt.Errorf("idem: the reference's %s is %s, not a string or number", pointer, raw)
	}
	return n.String(), nil
}

// Int64 is the integer at pointer (a string of digits too).
func (r Reference) Int64(pointer string) (int64, error) {
	s, err := r.String(pointer)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("idem: the reference's %s is %q, not an integer", pointer, s)
	}
	return n, nil
}

// renderMarker marks a stored response whose body is a Reference. It is
// stored with it and never sent.
const renderMarker = "Idemgen-Render-Reference"

// RenderedHeader says a replay was rendered again from its reference, not
// replayed byte for byte: fields that changed since (a status) show their
// current value.
const RenderedHeader = "Idempotent-Rendered"

// forStore returns the response to store for resp and the one to send
// first: the same one, with the stored headers only, except for an
// operation that renders its replays, which stores its reference.
func (e *Engine) forStore(ctx context.Context, c *claim, phase string, resp *Response) (stored, first *Response, omitted bool, err error) {
	first = &Response{Status: resp.Status, Header: e.storedHeaders(c, resp.Header), Body: resp.Body}
	if len(c.policy.Render) == 0 || resp.Status < 200 || resp.Status > 299 || len(resp.Body) == 0 {
		// Stored byte for byte: an operation that does not render, and
		// the others' answers that are no resource (a 404, a 409 a phase
		// answered with, a 204 or a 202 without a body), which the render
		// pointers need not name.
		omitted = len(first.Body) > c.policy.MaxReplayBody
		if omitted {
			e.observe(ctx, Event{Kind: EventNotStored, Operation: c.op.ID, Status: resp.Status})
		}
		return first, first, omitted, nil
	}
	ref, err := reference(resp.Body, c.policy.Render)
	if err != nil {
		return nil, nil, false, fmt.Errorf("idem: final phase %s: %w", phase, err)
	}
	h := first.Header.Clone()
	h.Set(renderMarker, "1")
	return &Response{Status: resp.Status, Header: h, Body: ref}, first, false, nil
}

// reference extracts the values at pointers from a JSON body, each as
// the body wrote it: numbers are kept as their digits (json.Number), never
// rounded through a float64, so that a 64-bit id renders its own resource.
func reference(body []byte, pointers []string) ([]byte, error) {
	var doc any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	err := d.Decode(&doc)
	if err == nil {
		if _, terr := d.Token(); terr != io.EOF {
			err = errors.New("more than one JSON value")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the response body is not JSON, so its replays cannot be rendered from a reference: %w", err)
	}
	ref := make(map[string]any, len(pointers))
	for _, p := range pointers {
		v, ok := idemtype.Lookup(doc, p)
		if !ok {
			return nil, fmt.Errorf("the response body has no %s, which its replays are rendered from", p)
		}
		ref[p] = v
	}
	return json.Marshal(ref)
}

// rendered reports whether a stored response is a reference to render.
func rendered(resp *Response) bool {
	return resp != nil && resp.Header.Get(renderMarker) != ""
}

// KeptRender is the Render of a final phase whose operation does not
// render its replays (Policy.Render empty), for the records stored while
// it did: a spec that turns replay.render off leaves, until their
// retention passes, records that keep a reference, not an answer. When
// impl still has the Render method the operation had, KeptRender returns
// it, its typed response made a Response by send; otherwise nil, and such
// a record's replay fails saying to keep the method. The generated glue
// passes it for every final phase of an operation that does not render.
func KeptRender[R any](impl any, send func(R) (*Response, error)) func(context.Context, pgx.Tx, Reference) (*Response, error) {
	r, ok := impl.(interface {
		Render(context.Context, pgx.Tx, Reference) (R, error)
	})
	if !ok {
		return nil
	}
	return func(ctx context.Context, tx pgx.Tx, ref Reference) (*Response, error) {
		resp, err := r.Render(ctx, tx, ref)
		if err != nil {
			return nil, err
		}
		if any(resp) == nil {
			return nil, errors.New("idem: Render returned no response")
		}
		return send(resp)
	}
}

// renderReplay renders again the answer a stored reference stands for,
// with render in a read-only transaction: the stored status and replay
// headers (Location, the resource's id), the render's body and its
// Content-Type, and RenderedHeader.
func (e *Engine) renderReplay(ctx context.Context, op *Operation, stored *Response, render func(context.Context, pgx.Tx, Reference) (*Response, error)) (*Response, error) {
	if render == nil {
		return nil, fmt.Errorf("idem: operation %s stored this answer as a reference to render (replay.render), but its final phase has no Render: keep the Render method until the records stored with replay.render on are past their retention", op.ID)
	}
	var ref Reference
	if err := json.Unmarshal(stored.Body, &ref); err != nil {
		return nil, fmt.Errorf("idem: operation %s: decoding the stored reference: %w", op.ID, err)
	}
	conn, err := e.acquireHeld(ctx)
	if err != nil {
		if errors.Is(err, errPoolExhausted) {
			return nil, errPoolExhausted
		}
		return nil, e.storeFailed(ctx, op, "render", wrapStore("render", "connect", err))
	}
	defer e.giveBack(conn)
	var resp *Response
	err = pgx.BeginTxFunc(ctx, conn.pc, renderTx, func(tx pgx.Tx) error {
		var err error
		err = recovered("render", func() error {
			resp, err = render(ctx, tx, ref)
			return err
		})
		return err
	})
	if st := sqlState(err); st == readOnlyTransaction || st == readWriteAfterQuery {
		err = fmt.Errorf("idem: the render of %s wrote to the database: a render only reads (its transaction is read-only): %w", op.ID, err)
	}
	if err == nil && resp == nil {
		err = fmt.Errorf("idem: the render of %s returned no response", op.ID)
	}
	if err != nil {
		e.log.LogAttrs(ctx, slog.LevelError, "idem: a replay could not be rendered", storeAttrs([]slog.Attr{slog.String("operation", op.ID)}, err)...)
		return nil, &Error{Kind: idemtype.KindFailed, Err: err, Detail: "the request's answer could not be rendered again; retrying does not help until the service is fixed"}
	}
	h := http.Header{}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		h.Set("Content-Type", ct)
	}
	for k, v := range stored.Header {
		if k != renderMarker {
			h[k] = v
		}
	}
	h.Set(RenderedHeader, "true")
	return &Response{Status: stored.Status, Header: h, Body: resp.Body}, nil
}

// renderTx begins a render's read-only transaction and takes its
// snapshot in the same round trip (one simple-protocol query): after a
// query, PostgreSQL refuses to make the transaction read-write again (SET
// TRANSACTION READ WRITE, set_config of transaction_read_only), so a render
// cannot write.
var renderTx = pgx.TxOptions{BeginQuery: "BEGIN READ ONLY; SELECT 1"}

// readOnlyTransaction is SQLSTATE 25006, a write in a read-only
// transaction.
const readOnlyTransaction = "25006"

// readWriteAfterQuery is SQLSTATE 25001, a transaction made read-write
// after its first query.
const readWriteAfterQuery = "25001"

// errNoRender is Run's answer for a kept handler in render mode.
var errNoRender = errors.New("idem: a kept handler cannot render its replays (Policy.Render); use phases")
