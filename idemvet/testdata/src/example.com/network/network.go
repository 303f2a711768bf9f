// Package network holds local and final phases that call other systems,
// directly, through a dependency, and through this package's helpers.
package network

import (
	"context"
	"net"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"example.com/api"
	"example.com/cardnet"
)

// Notifier is an interface: calls through it are not followed.
type Notifier interface {
	Notify(ctx context.Context) error
}

// Doer sends an *http.Request: calls through it are.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

type Chatty struct {
	Cards    *cardnet.Client
	Notifier Notifier
	Doer     Doer
}

func (p *Chatty) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error { // want Record:"reaches the network via http.Get" Record:"calls out of sight via \\(network.Notifier\\).Notify"
	if _, err := http.Get("http://ledger.example/ping"); err != nil { // want `^Chatty.Record: no-network-in-local: http.Get reaches the network, which happens again each time the phase's transaction rolls back and is retried; call other systems from a foreign phase under its key, or write an outbox row through tx$`
		return err
	}
	if _, err := p.Cards.Charge(ctx, "k", cardnet.Request{Amount: request.Amount}); err != nil { // want `^Chatty.Record: no-network-in-local: p.Cards.Charge reaches the network \(via \(\*http.Client\).Do\), `
		return err
	}
	if err := publish(ctx, state); err != nil { // want `publish reaches the network \(via \(\*kafka.Writer\).WriteMessages\)`
		return err
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://audit.example", nil)
	if _, err := p.Doer.Do(req); err != nil { // want `p.Doer.Do reaches the network, `
		return err
	}
	// Not followed: an interface method, and a local computation.
	if err := p.Notifier.Notify(ctx); err != nil {
		return err
	}
	state.Amount = p.Cards.Quote(cardnet.Request{Amount: request.Amount})
	_, err := tx.Exec(ctx, "INSERT INTO outbox (topic) VALUES ('payment')")
	return err
}

// publish reaches the network through emit.
func publish(ctx context.Context, state *api.State) error { // want publish:"reaches the network via \\(\\*kafka.Writer\\).WriteMessages"
	return emit(ctx, []byte(state.ChargeID))
}

func emit(ctx context.Context, b []byte) error { // want emit:"reaches the network via \\(\\*kafka.Writer\\).WriteMessages"
	w := &kafka.Writer{Addr: "kafka:9092"}
	return w.WriteMessages(ctx, kafka.Message{Value: b})
}

// Dialer is a final phase that dials.
type Dialer struct{}

func (Dialer) Finish(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) (api.Response, error) { // want Finish:"reaches the network via net.Dial"
	c, err := net.Dial("tcp", "fraud.example:443") // want `^Dialer.Finish: no-network-in-local: net.Dial reaches the network, `
	if err != nil {
		return api.Response{}, err
	}
	return api.Response{}, c.Close()
}

var (
	_ api.LocalPhases = (*Chatty)(nil)
	_ api.FinalPhases = Dialer{}
)

// Quiet stays in the database.
type Quiet struct{ Cards *cardnet.Client }

func (q *Quiet) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	state.Amount = q.Cards.Quote(cardnet.Request{Amount: request.Amount})
	_, err := tx.Exec(ctx, "INSERT INTO outbox (topic, body) VALUES ('charge', $1)", state.Amount)
	return err
}
