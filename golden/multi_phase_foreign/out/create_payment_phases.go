package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes createPayment's phases, the assertion
// below stops compiling until these methods match CreatePaymentPhases again.
//
// Prove the phases once they are written (docs/testing.md):
//
//	idemtest.Check(t, idemtest.Case[CreatePaymentState]{
//		Operation: CreatePaymentOperation(),
//		Phases: func() []idem.Phase[CreatePaymentState] {
//			return CreatePaymentPhaseList(&CreatePaymentImpl{}, request)
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

// CreatePaymentState is what the phases of createPayment hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type CreatePaymentState struct {
}

// CreatePaymentImpl implements CreatePaymentPhases. Put its dependencies here.
type CreatePaymentImpl struct {
}

var _ CreatePaymentPhases = (*CreatePaymentImpl)(nil)

// RecordPayment is phase 1 of 4 ("record_payment"), local: it runs in tx, whose commit also records
// this phase as done and saves state.
func (p *CreatePaymentImpl) RecordPayment(ctx context.Context, tx pgx.Tx, request CreatePaymentRequestObject, state *CreatePaymentState) error {
	return idem.ErrNotImplemented
}

// ChargeCard is phase 2 of 4 ("charge_card"), foreign: it runs outside any transaction. Send key as
// the other system's idempotency key; it is the same on every retry. What it writes into state is
// saved by the next phase's commit.
func (p *CreatePaymentImpl) ChargeCard(ctx context.Context, key string, request CreatePaymentRequestObject, state *CreatePaymentState) error {
	return idem.ErrNotImplemented
}

// NotifyFraudCheck is phase 3 of 4 ("notify_fraud_check"), foreign: it runs outside any
// transaction. Send key as the other system's idempotency key; it is the same on every retry. What
// it writes into state is saved by the next phase's commit.
func (p *CreatePaymentImpl) NotifyFraudCheck(ctx context.Context, key string, request CreatePaymentRequestObject, state *CreatePaymentState) error {
	return idem.ErrNotImplemented
}

// Finish is phase 4 of 4 ("finish"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *CreatePaymentImpl) Finish(ctx context.Context, tx pgx.Tx, request CreatePaymentRequestObject, state *CreatePaymentState) (CreatePaymentResponseObject, error) {
	return nil, idem.ErrNotImplemented
}
