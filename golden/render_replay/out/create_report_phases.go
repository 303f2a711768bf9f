package api

// This file is yours. idemgen wrote it because it was missing and will never
// overwrite it. If the spec changes createReport's phases, the assertion
// below stops compiling until these methods match CreateReportPhases again.
//
// Prove the phases once they are written (docs/testing.md):
//
//	idemtest.Check(t, idemtest.Case[CreateReportState]{
//		Operation: CreateReportOperation(),
//		Phases: func() []idem.Phase[CreateReportState] {
//			return CreateReportPhaseList(&CreateReportImpl{}, request)
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

// CreateReportState is what the phases of createReport hand to each other. It is
// saved as JSON with every local phase's commit, and a resumed execution
// starts from the saved copy: keep its fields exported and JSON-encodable.
type CreateReportState struct {
}

// CreateReportImpl implements CreateReportPhases. Put its dependencies here.
type CreateReportImpl struct {
}

var _ CreateReportPhases = (*CreateReportImpl)(nil)

// Execute is phase 1 of 1 ("execute"), final: it runs in tx, which also stores the response it
// returns; that response is replayed byte for byte to every retry.
func (p *CreateReportImpl) Execute(ctx context.Context, tx pgx.Tx, request CreateReportRequestObject, state *CreateReportState) (CreateReportResponseObject, error) {
	return nil, idem.ErrNotImplemented
}

// Render renders the answer again for a replay (replay.render): the operation stores only its
// status, its replay headers and reference, the values at the render pointers of its first answer,
// and every retry gets what Render returns from them, in tx, a read-only transaction: the resource
// as it is now. The stored status and headers (Location) replace Render's; Render must not write.
func (p *CreateReportImpl) Render(ctx context.Context, tx pgx.Tx, reference idem.Reference) (CreateReportResponseObject, error) {
	return nil, idem.ErrNotImplemented
}
