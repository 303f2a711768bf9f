package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes createTransfer's phases, the assertion
// below stops compiling until these methods match CreateTransferPhases again.
//
// Prove the phases once they are written (docs/testing.md):
//
//	idemtest.Check(t, idemtest.Case[CreateTransferState]{
//		Operation: CreateTransferOperation(),
//		Phases: func() []idem.Phase[CreateTransferState] {
//			return CreateTransferPhaseList(&CreateTransferImpl{}, request)
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

// CreateTransferState is what the phases of createTransfer hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type CreateTransferState struct {
}

// CreateTransferImpl implements CreateTransferPhases. Put its dependencies here.
type CreateTransferImpl struct {
}

var _ CreateTransferPhases = (*CreateTransferImpl)(nil)

// Debit is phase 1 of 3 ("debit"), local: it runs in tx, whose commit also records this phase as
// done and saves state.
func (p *CreateTransferImpl) Debit(ctx context.Context, tx pgx.Tx, request CreateTransferRequestObject, state *CreateTransferState) error {
	return idem.ErrNotImplemented
}

// NotifyBank is phase 2 of 3 ("notify_bank"), foreign: it runs outside any transaction. Send key as
// the other system's idempotency key; it is the same on every retry. What it writes into state is
// saved by the next phase's commit.
func (p *CreateTransferImpl) NotifyBank(ctx context.Context, key string, request CreateTransferRequestObject, state *CreateTransferState) error {
	return idem.ErrNotImplemented
}

// Credit is phase 3 of 3 ("credit"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *CreateTransferImpl) Credit(ctx context.Context, tx pgx.Tx, request CreateTransferRequestObject, state *CreateTransferState) (CreateTransferResponseObject, error) {
	return nil, idem.ErrNotImplemented
}
