// Package stateorder holds phases that hand state on: in the spec's
// order, and with two phases swapped.
package stateorder

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"example.com/api"
	"example.com/cardnet"
)

// Payment records the amount, charges it, and answers the charge.
type Payment struct{ Cards *cardnet.Client }

var _ api.PaymentPhases = (*Payment)(nil)

func (p *Payment) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	state.Amount = request.Amount
	return nil
}

func (p *Payment) Charge(ctx context.Context, key string, request api.Request, state *api.State) error { // want Charge:"reaches the network via \\(\\*http.Client\\).Do"
	ch, err := p.Cards.Charge(ctx, key, cardnet.Request{Amount: state.Amount, Customer: request.Customer})
	state.ChargeID = ch.ID
	return err
}

func (p *Payment) Finish(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) (api.Response, error) {
	return api.Response{ID: state.ChargeID}, nil
}

// Swapped has the same bodies, but the spec now charges before it
// records: the charge reads an amount nothing has set.
type Swapped struct{ Cards *cardnet.Client }

var _ api.SwappedPhases = (*Swapped)(nil)

func (p *Swapped) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.SwappedState) error {
	state.Amount = request.Amount
	return nil
}

func (p *Swapped) Charge(ctx context.Context, key string, request api.Request, state *api.SwappedState) error { // want Charge:"reaches the network via \\(\\*http.Client\\).Do"
	ch, err := p.Cards.Charge(ctx, key, cardnet.Request{Amount: state.Amount, Customer: request.Customer}) // want `Swapped.Charge: state-order: reads state.Amount, which no earlier phase writes \(the phases in the spec's order: Charge, Record, Finish\); Swapped.Record writes it, but runs after`
	state.ChargeID = ch.ID
	return err
}

func (p *Swapped) Finish(ctx context.Context, tx pgx.Tx, request api.Request, state *api.SwappedState) (api.Response, error) {
	return api.Response{ID: state.ChargeID}, nil
}

// Decoded hands its whole state to a decoder in its first phase: every
// field may be set after it, and nothing is reported.
type Decoded struct{ Cards *cardnet.Client }

var _ api.SwappedPhases = (*Decoded)(nil)

func (p *Decoded) Charge(ctx context.Context, key string, request api.Request, state *api.SwappedState) error { // want Charge:"reaches the network via \\(\\*http.Client\\).Do"
	if err := json.Unmarshal([]byte(`{"Amount":5}`), state); err != nil {
		return err
	}
	ch, err := p.Cards.Charge(ctx, key, cardnet.Request{Amount: state.Amount})
	state.ChargeID = ch.ID
	return err
}

func (p *Decoded) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.SwappedState) error {
	return nil
}

func (p *Decoded) Finish(ctx context.Context, tx pgx.Tx, request api.Request, state *api.SwappedState) (api.Response, error) {
	return api.Response{ID: state.ChargeID}, nil
}
