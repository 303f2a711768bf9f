// Package generic implements phases with generic types: an instantiation
// implements the interface, directly or embedded in another type.
package generic

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/api"
	"example.com/cardnet"
)

type Gen[T any] struct {
	Pool *pgxpool.Pool
	last T
}

var (
	_ api.LocalPhases = (*Gen[int])(nil)
	_ api.LocalPhases = (*Gen[string])(nil) // the same method: reported once
)

func (g *Gen[T]) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	_, err := g.Pool.Exec(ctx, "INSERT INTO a VALUES (1)") // want `^Gen.Record: tx-only: g.Pool.Exec goes through a \*pgxpool.Pool`
	return err
}

type Sender[T any] struct {
	Cards *cardnet.Client
	meta  T
}

func (s *Sender[T]) Send(ctx context.Context, key string, request api.Request, state *api.State) error { // want Send:"reaches the network"
	key = uuid.NewString() // want `^Sender.Send: foreign-key: this replaces key`
	_, err := s.Cards.Charge(ctx, key, cardnet.Request{Amount: state.Amount})
	return err
}

// Embedded gets its phase from the generic type it embeds.
type Embedded struct{ *Sender[string] }

var _ api.ForeignPhases = Embedded{}

// Remote is instantiated only by the packages that use it.
type Remote[T any] struct{ Pool *pgxpool.Pool }

func (r Remote[T]) Record(ctx context.Context, tx pgx.Tx, request api.Request, state *api.State) error {
	_, err := r.Pool.Exec(ctx, "INSERT INTO a VALUES (1)") // want `^Remote.Record: tx-only: r.Pool.Exec goes through a \*pgxpool.Pool`
	return err
}

// Typed implements the interface only for the request type it is
// instantiated with.
type Typed[R any] struct{ Pool *pgxpool.Pool }

var _ api.LocalPhases = (*Typed[api.Request])(nil)

func (t *Typed[R]) Record(ctx context.Context, tx pgx.Tx, request R, state *api.State) error {
	_, err := t.Pool.Exec(ctx, "INSERT INTO a VALUES (1)") // want `^Typed.Record: tx-only: t.Pool.Exec goes through a \*pgxpool.Pool`
	return err
}
