// Package foreign holds foreign phases: some send their key with values
// stored in state, others lose the key or send values a resumed attempt
// would compute again differently.
package foreign

import (
	"context"
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

func (p Unused) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want `^Unused.Send: foreign-key: the phase never uses key; send it as the other system's idempotency key \(a header, field or parameter\), so that a resumed execution gets the first call's result instead of a second effect$` Send:"reaches the network"
	_, err := p.Cards.Charge(ctx, state.ChargeID, cardnet.Request{Amount: state.Amount})
	return err
}

// Blank cannot.
type Blank struct{}

func (Blank) Send(ctx context.Context, _ string, request api.Request, state *api.State) error { // want `^Blank.Send: foreign-key: the key parameter is blank, `
	return nil
}

// Fresh replaces its key with a new one on every attempt.
type Fresh struct{ Cards *cardnet.Client }

func (p *Fresh) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	key = uuid.NewString() // want `^Fresh.Send: foreign-key: this replaces key, the key idemgen derived for the phase, which is the same on every retry: a resumed attempt sends another key and the other system performs the effect again; send key unchanged$`
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
