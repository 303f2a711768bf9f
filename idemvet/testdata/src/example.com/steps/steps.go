// Package steps holds handlers that take steps: the same on every run,
// and not.
package steps

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/jackc/pgx/v5"
)

type Server struct{ DB idem.Beginner }

func record(ctx context.Context, tx pgx.Tx) (int, error) { return 1, nil }

func charge(ctx context.Context, key string) (string, error) { return key, nil }

// Good takes two steps, decided from the request and a step's result.
func (s *Server) Good(ctx context.Context, amount int) error {
	id, err := idem.Local(ctx, s.DB, "record", record)
	if err != nil || id == 0 || amount == 0 {
		return err
	}
	_, err = idem.Foreign(ctx, "charge", charge)
	return err
}

func (s *Server) Named(ctx context.Context, name string) error {
	_, err := idem.Local(ctx, s.DB, name, record) // want `Named: step-determinism: the name of this idem.Local is not a constant`
	return err
}

func (s *Server) Twice(ctx context.Context) error {
	if _, err := idem.Local(ctx, s.DB, "record", record); err != nil {
		return err
	}
	_, err := idem.Local(ctx, s.DB, "record", record) // want `Twice: step-determinism: step "record" is taken twice in Twice`
	return err
}

func (s *Server) Loop(ctx context.Context, items []string) error {
	for _, it := range items {
		if _, err := idem.Foreign(ctx, "charge-"+fmt.Sprint(len(it)), charge); err != nil { // want `Loop: step-determinism: the name of this idem.Foreign is not a constant` `Loop: step-determinism: idem.Foreign is taken in a loop`
			return err
		}
	}
	return nil
}

func (s *Server) Clock(ctx context.Context) error {
	if time.Now().Hour() < 12 {
		if _, err := idem.Foreign(ctx, "morning", charge); err != nil { // want `Clock: step-determinism: whether idem.Foreign is taken depends on the clock \(time.Now\)`
			return err
		}
	}
	if rand.IntN(2) == 0 {
		_, err := idem.Local(ctx, s.DB, "coin", record) // want `Clock: step-determinism: whether idem.Local is taken depends on randomness \(rand/v2.IntN\)`
		return err
	}
	return nil
}

// Guarded ends early on the clock: the step after the guard is taken or
// not depending on it.
func (s *Server) Guarded(ctx context.Context, deadline time.Time) error {
	if time.Now().After(deadline) {
		return nil
	}
	_, err := idem.Foreign(ctx, "charge", charge) // want `Guarded: step-determinism: whether idem.Foreign is taken depends on the clock \(time.Now\)`
	return err
}

// Switched takes one step or another on the clock.
func (s *Server) Switched(ctx context.Context) error {
	switch {
	case time.Now().Hour() < 12:
		return nil
	default:
		_, err := idem.Foreign(ctx, "charge", charge) // want `Switched: step-determinism: whether idem.Foreign is taken depends on the clock \(time.Now\)`
		return err
	}
}
