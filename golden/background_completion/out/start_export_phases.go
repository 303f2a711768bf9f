package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes startExport's phases, the assertion
// below stops compiling until these methods match StartExportPhases again.
//
// Prove the phases once they are written (docs/testing.md):
//
//	idemtest.Check(t, idemtest.Case[StartExportState]{
//		Operation: StartExportOperation(),
//		Phases: func() []idem.Phase[StartExportState] {
//			return StartExportPhaseList(&StartExportImpl{}, request)
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

// StartExportState is what the phases of startExport hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type StartExportState struct {
}

// StartExportImpl implements StartExportPhases. Put its dependencies here.
type StartExportImpl struct {
}

var _ StartExportPhases = (*StartExportImpl)(nil)

// Queue is phase 1 of 3 ("queue"), local: it runs in tx, whose commit also records this phase as
// done and saves state.
func (p *StartExportImpl) Queue(ctx context.Context, tx pgx.Tx, request StartExportRequestObject, state *StartExportState) error {
	return idem.ErrNotImplemented
}

// Upload is phase 2 of 3 ("upload"), foreign: it runs outside any transaction. Send key as the
// other system's idempotency key; it is the same on every retry. What it writes into state is saved
// by the next phase's commit.
func (p *StartExportImpl) Upload(ctx context.Context, key string, request StartExportRequestObject, state *StartExportState) error {
	return idem.ErrNotImplemented
}

// Done is phase 3 of 3 ("done"), final: it runs in tx, which also stores the response it returns;
// that response is replayed byte for byte to every retry.
func (p *StartExportImpl) Done(ctx context.Context, tx pgx.Tx, request StartExportRequestObject, state *StartExportState) (StartExportResponseObject, error) {
	return nil, idem.ErrNotImplemented
}
