package idemecho_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemtype"
)

// TestRuntimeRunsTheCompleter: an operation with complete: background is
// finished in the background without the service calling anything but the
// generated Register, which calls rt.StartCompleter: an abandoned execution
// completes with no retry, and stops when rt.Context ends.
func TestRuntimeRunsTheCompleter(t *testing.T) {
	env := idemtest.New(t, idem.Options{})
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, `CREATE TABLE done (key text)`); err != nil {
		t.Fatal(err)
	}
	op := &idem.Operation{ID: "export", Policy: idem.Policy{Lease: time.Second, Complete: idemtype.CompleteBackground}}
	phases := func(key string, crash bool) []idem.Phase[struct{}] {
		return []idem.Phase[struct{}]{
			{Name: "record", Local: func(ctx context.Context, tx pgx.Tx, _ *struct{}) error {
				_, err := tx.Exec(ctx, `INSERT INTO done VALUES ($1)`, key)
				return err
			}},
			{Name: "call", Foreign: func(context.Context, string, *struct{}) error {
				if crash {
					runtime.Goexit() // the process died after the first phase
				}
				return nil
			}},
			{Name: "finish", Final: func(context.Context, pgx.Tx, *struct{}) (*idem.Response, error) {
				return &idem.Response{Status: 201, Body: []byte(`{}`)}, nil
			}},
		}
	}
	idem.RegisterCompleter(env.Engine, op, func(payload []byte) ([]idem.Phase[struct{}], error) {
		return phases(string(payload), false), nil
	})
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	rt := &idemecho.Runtime{Engine: env.Engine, Context: cctx, CompleterInterval: 100 * time.Millisecond}
	rt.StartCompleter()
	done := make(chan struct{})
	go func() {
		defer close(done)
		idem.Run(ctx, env.Engine, op, idem.KeyedRequest{Scope: "s", Key: "k", Fingerprint: []byte("f"), Payload: []byte("k")}, phases("k", true))
	}()
	<-done
	deadline := time.Now().Add(30 * time.Second)
	for {
		var completed bool
		if err := env.Pool.QueryRow(ctx, `SELECT count(*) = 1 FROM records WHERE owner_token IS NULL`).Scan(&completed); err != nil {
			t.Fatal(err)
		}
		if completed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned execution was not completed in the background")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
