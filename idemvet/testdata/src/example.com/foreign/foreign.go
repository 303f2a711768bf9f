// Package foreign holds foreign phases: some send their key with values
// stored in state, others lose the key or send values a resumed attempt
// would compute again differently.
package foreign

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/api"
	"example.com/cardnet"
	"example.com/psp"
	"example.com/sdk"
	"example.com/telemetry"
)

var (
	_ api.ForeignPhases = (*Good)(nil)
	_ api.ForeignPhases = Unused{}
	_ api.ForeignPhases = Blank{}
	_ api.ForeignPhases = (*Fresh)(nil)
	_ api.ForeignPhases = (*Clock)(nil)
	_ api.ForeignPhases = (*Random)(nil)
	_ api.ForeignPhases = (*Read)(nil)
	_ api.ForeignPhases = (*Raw)(nil)
	_ api.ForeignPhases = (*Derived)(nil)
	_ api.ForeignPhases = Scaffold{}
	_ api.ForeignPhases = Fake{}
	_ api.ForeignPhases = (*Logged)(nil)
	_ api.ForeignPhases = (*Notified)(nil)
	_ api.ForeignPhases = (*Pointers)(nil)
	_ api.ForeignPhases = (*Built)(nil)
	_ api.ForeignPhases = (*Encoded)(nil)
	_ api.ForeignPhases = (*Batched)(nil)
	_ api.ForeignPhases = (*Wrapped)(nil)
	_ api.ForeignPhases = (*Prefixed)(nil)
	_ api.ForeignPhases = (*Backed)(nil)
)

// Good sends key and values from request and state.
type Good struct{ Cards *cardnet.Client }

func (p *Good) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network via \\(\\*http.Client\\).Do"
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, time.Now().Add(5*time.Second))
	defer cancel()
	slog.Info("charging", "key", key, "at", time.Now())
	ch, err := p.Cards.Charge(ctx, key, cardnet.Request{Amount: state.Amount, Customer: strings.ToUpper(request.Customer)})
	if err != nil {
		return fmt.Errorf("charge under %s after %v: %w", key, time.Since(start), err)
	}
	state.ChargeID = ch.ID
	return nil
}

// Unused never sends its key.
type Unused struct{ Cards *cardnet.Client }

func (p Unused) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want `^Unused.Send: foreign-key: the phase never sends key \(naming it in a log or an error does not send it\); send it as the other system's idempotency key \(a header, field or parameter\), so that a resumed execution gets the first call's result instead of a second effect$` Send:"reaches the network"
	_, err := p.Cards.Charge(ctx, state.ChargeID, cardnet.Request{Amount: state.Amount})
	return err
}

// Blank cannot.
type Blank struct{ Cards *cardnet.Client }

func (p Blank) Send(ctx context.Context, _ string, request api.Request, state *api.State) error { // want `^Blank.Send: foreign-key: the key parameter is blank, ` Send:"reaches the network"
	_, err := p.Cards.Charge(ctx, state.ChargeID, cardnet.Request{Amount: state.Amount})
	return err
}

// Fake is a test's fake: it calls nobody, so it has nothing to send its
// key with, and is not checked.
type Fake struct{ calls *int }

func (f Fake) Send(context.Context, string, api.Request, *api.State) error {
	*f.calls++
	return nil
}

// Fresh replaces its key with a new one on every attempt.
type Fresh struct{ Cards *cardnet.Client }

func (p *Fresh) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	key = uuid.NewString() // want `^Fresh.Send: foreign-key: this replaces key, the key idemgen derived for the phase, which is the same on every retry: a resumed attempt sends another key and the other system performs the effect again; send key unchanged$`
	if request.Amount > 100 {
		key = fmt.Sprintf("unsafe-%d", rand.Int64()) // want `foreign-key: this replaces key`
	}
	if request.Customer == "" {
		key = key + "-" + uuid.NewString() // want `foreign-key: this replaces key`
	}
	_, err := p.Cards.Charge(ctx, key, cardnet.Request{Amount: state.Amount})
	return err
}

// Clock sends the time.
type Clock struct{ Cards *cardnet.Client }

func (p *Clock) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	_, err := p.Cards.Charge(ctx, key, cardnet.Request{
		Amount:   time.Now().Unix(), // want `^Clock.Send: foreign-reproducible: field Amount, sent with key by p.Cards.Charge, is computed from time.Now, so a resumed attempt sends another value under the same key; store it in state in an earlier local phase and send that$`
		Customer: request.Customer,
	})
	if err != nil {
		return err
	}
	_, err = p.Cards.Charge(ctx, key, cardnet.Request{time.Since(time.Unix(state.At, 0)).Milliseconds(), request.Customer}) // want `field Amount, sent with key by p.Cards.Charge, is computed from time.Since`
	return err
}

// Random sends a random amount, through a local variable, and a random
// reference derived from key.
type Random struct{ Cards *cardnet.Client }

func (p *Random) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	amount := rand.Int64N(100)
	req := cardnet.Request{Customer: request.Customer}
	req.Amount = amount
	if _, err := p.Cards.Charge(ctx, key, req); err != nil { // want `argument req, sent with key by p.Cards.Charge, is computed from rand.Int64N`
		return err
	}
	ref := key + "-" + uuid.Must(uuid.NewV7()).String()
	_, err := p.Cards.Charge(ctx, ref, cardnet.Request{Amount: state.Amount}) // want `argument ref, sent with key by p.Cards.Charge, is computed from uuid.NewV7`
	return err
}

// Read sends what it reads from the database now, not what a local phase
// stored.
type Read struct {
	Pool  *pgxpool.Pool
	Cards *cardnet.Client
}

func (p *Read) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	var balance int64
	if err := p.Pool.QueryRow(ctx, "SELECT balance FROM accounts WHERE customer = $1", request.Customer).Scan(&balance); err != nil {
		return err
	}
	_, err := p.Cards.Charge(ctx, key, cardnet.Request{Amount: balance, Customer: request.Customer}) // want `field Amount, sent with key by p.Cards.Charge, is computed from a database read, p.Pool.QueryRow`
	return err
}

// Raw builds its own request; the key goes in a header, the time in
// another.
type Raw struct{ HTTP *http.Client }

func (p *Raw) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network via \\(\\*http.Client\\).Do"
	req, err := http.NewRequestWithContext(ctx, "POST", "https://psp.example/charges", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Requested-At", time.Now().Format(time.RFC3339))
	res, err := p.HTTP.Do(req) // want `argument req, sent with key by p.HTTP.Do, is computed from time.Now`
	if err != nil {
		return err
	}
	return res.Body.Close()
}

// Derived sends a key derived from its key, and a name-based UUID: both are
// the same on every attempt.
type Derived struct{ Cards *cardnet.Client }

func (p *Derived) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	ref := uuid.NewSHA1(uuid.NameSpaceURL, []byte(key)).String()
	_, err := p.Cards.Charge(ctx, key+"-refund", cardnet.Request{Amount: state.Amount, Customer: ref})
	return err
}

// Scaffold is idemgen's stub, not yet written: not checked.
type Scaffold struct{}

func (Scaffold) Send(ctx context.Context, key string, request api.Request, state *api.State) error {
	return idem.ErrNotImplemented
}

// Logged logs and measures through the service's own logger and metrics:
// they compute, they do not send.
type Logged struct {
	Cards   *cardnet.Client
	log     *telemetry.Logger
	metrics *telemetry.Metrics
}

func (p *Logged) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	start := time.Now()
	p.log.Infof("charging under %s at %v", key, time.Now())
	_, err := p.Cards.Charge(ctx, key, cardnet.Request{Amount: state.Amount})
	p.metrics.Observe(key, time.Since(start))
	return err
}

// Notifier is an interface: what a call of it is given may be sent.
type Notifier interface {
	Notify(ctx context.Context, key string, at time.Time) error
}

// Notified tells a notifier the time under key.
type Notified struct{ Notifier Notifier }

func (p *Notified) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"calls out of sight via \\(foreign.Notifier\\).Notify"
	return p.Notifier.Notify(ctx, key, time.Now()) // want `^Notified.Send: foreign-reproducible: argument time.Now\(\), sent with key by p.Notifier.Notify, is computed from time.Now, `
}

// Pointers builds a stripe-style parameter struct, its key set through a
// pointer helper.
type Pointers struct{ PSP *psp.Client }

func (p *Pointers) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	params := &psp.ChargeParams{Amount: psp.Int64(time.Now().Unix()), Customer: psp.String(request.Customer)}
	params.IdempotencyKey = strPtr(key)
	if _, err := p.PSP.Create(ctx, params); err != nil { // want `argument params, sent with key by p.PSP.Create, is computed from time.Now`
		return err
	}
	again := &psp.ChargeParams{IdempotencyKey: ptr(key), Amount: ptr(rand.Int64())}
	if _, err := p.PSP.Create(ctx, again); err != nil { // want `argument again, sent with key by p.PSP.Create, is computed from rand.Int64`
		return err
	}
	_, err := p.PSP.Create(ctx, &psp.ChargeParams{
		IdempotencyKey: psp.String(key),
		Amount:         psp.Int64(time.Now().Unix()), // want `field Amount, sent with key by p.PSP.Create, is computed from time.Now`
	})
	return err
}

func strPtr(s string) *string { return &s }

func ptr[T any](v T) *T { return &v }

// Built gets its request, key set, from a helper.
type Built struct{ HTTP *http.Client }

func (p *Built) newReq(ctx context.Context, key string, body *bytes.Buffer) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, "POST", "https://psp.example/charges", body)
	req.Header.Set("Idempotency-Key", key)
	return req
}

func (p *Built) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network via \\(\\*http.Client\\).Do"
	req := p.newReq(ctx, key, nil)
	req.Header.Set("X-At", time.Now().String())
	res, err := p.HTTP.Do(req) // want `argument req, sent with key by p.HTTP.Do, is computed from time.Now`
	if err != nil {
		return err
	}
	return res.Body.Close()
}

// Encoded encodes the time into the body of the request its key is sent
// with.
type Encoded struct{ HTTP *http.Client }

func (p *Encoded) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network via \\(\\*http.Client\\).Do"
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(map[string]any{"amount": state.Amount, "at": time.Now()}); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", "https://psp.example/charges", &buf)
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", key)
	res, err := p.HTTP.Do(req) // want `argument req, sent with key by p.HTTP.Do, is computed from time.Now`
	if err != nil {
		return err
	}
	return res.Body.Close()
}

// Batched sends a slice of pointers to requests.
type Batched struct{ Cards *cardnet.Client }

func (p *Batched) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	_, err := p.Cards.ChargeAll(ctx, key, []*cardnet.Request{{Amount: time.Now().Unix()}}) // want `^Batched.Send: foreign-reproducible: field Amount, sent with key by p.Cards.ChargeAll, is computed from time.Now, `
	return err
}

// Wrapped names its key only in an error: it never sends it.
type Wrapped struct{ Cards *cardnet.Client }

func (p *Wrapped) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want `^Wrapped.Send: foreign-key: the phase never sends key ` Send:"reaches the network"
	if _, err := p.Cards.Charge(ctx, state.ChargeID, cardnet.Request{Amount: state.Amount}); err != nil {
		return fmt.Errorf("charge %s: %w", key, err)
	}
	return nil
}

// Prefixed derives the key it sends from its key: the same on every
// attempt.
type Prefixed struct{ Cards *cardnet.Client }

func (p *Prefixed) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	key = "pay-" + key
	key = strings.ToLower(key)
	key += "-v2"
	_, err := p.Cards.Charge(ctx, key, cardnet.Request{Amount: state.Amount})
	return err
}

// Backed charges through an SDK whose client calls an interface: what it
// is given may be sent.
type Backed struct{ Charges sdk.Client }

func (p *Backed) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"calls out of sight via \\(sdk.Backend\\).Call"
	params := &sdk.Params{Amount: sdk.Int64(time.Now().Unix())}
	params.IdempotencyKey = sdk.String(key)
	_, err := p.Charges.New(params) // want `argument params, sent with key by p.Charges.New, is computed from time.Now`
	return err
}
