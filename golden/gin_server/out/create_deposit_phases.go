package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes createDeposit's phases, the assertion
// below stops compiling until these methods match CreateDepositPhases again.
//
// Prove the phases once they are written (docs/testing.md):
//
//	idemtest.Check(t, idemtest.Case[CreateDepositState]{
//		Operation: CreateDepositOperation(),
//		Phases: func() []idem.Phase[CreateDepositState] {
//			return CreateDepositPhaseList(&CreateDepositImpl{}, request)
//		},
//	})
//
// runs them through a crash at every recovery point, a takeover and
// concurrent duplicates, and `go tool idemgen vet ./...` reads them for the
// rules a phase must keep (a local phase writes only through tx, a foreign
// phase sends key and what state holds).

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// CreateDepositState is what the phases of createDeposit hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type CreateDepositState struct {
}

// CreateDepositImpl implements CreateDepositPhases. Put its dependencies here.
type CreateDepositImpl struct {
}

var _ CreateDepositPhases = (*CreateDepositImpl)(nil)

// Record is phase 1 of 3 ("record"), local: it runs in tx, whose commit also records this phase as
// done and saves state.
func (p *CreateDepositImpl) Record(ctx context.Context, tx pgx.Tx, request CreateDepositRequestObject, state *CreateDepositState) error {
	return idem.ErrNotImplemented
}

// Notify is phase 2 of 3 ("notify"), foreign: it runs outside any transaction. Send key as the
// other system's idempotency key; it is the same on every retry. What it writes into state is saved
// by the next phase's commit.
func (p *CreateDepositImpl) Notify(ctx context.Context, key string, request CreateDepositRequestObject, state *CreateDepositState) error {
	return idem.ErrNotImplemented
}

// Finish is phase 3 of 3 ("finish"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *CreateDepositImpl) Finish(ctx context.Context, tx pgx.Tx, request CreateDepositRequestObject, state *CreateDepositState) (CreateDepositResponseObject, error) {
	return nil, idem.ErrNotImplemented
}
