package idem_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestSuppressedHeaderReplaysAlike: a header a final phase sets to nil
// (net/http's way to stop an automatic header, Content-Type's sniffing)
// is in the first answer, in a replay from memory and in a replay from
// the store alike: what a client gets does not depend on which instance
// answers. In every claim mode.
func TestSuppressedHeaderReplaysAlike(t *testing.T) {
	t.Parallel()
	inModes(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		phases := []idem.Phase[payState]{{Name: "finish", Final: func(ctx context.Context, tx pgx.Tx, s *payState) (*idem.Response, error) {
			return &idem.Response{Status: 200, Header: http.Header{"Content-Type": nil, "Location": {"/p/1"}}, Body: []byte("<html>sniffed as HTML</html>")}, nil
		}}}
		suppressed := func(where string, out *idem.Outcome, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if v, ok := out.Response.Header["Content-Type"]; !ok || len(v) != 0 {
				t.Errorf("%s: Content-Type %q (present %t); want present with no value, as the phase set it", where, v, ok)
			}
		}
		out, err := idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phases)
		suppressed("the first answer", out, err)
		out, err = idem.Run(ctx, e.eng, payOp, request("t", "k", "b"), phases)
		suppressed("a replay from memory", out, err)
		cold := mustEngineWith(t, e, idem.Options{ReplayCacheBytes: -1})
		out, err = idem.Run(ctx, cold, payOp, request("t", "k", "b"), phases)
		suppressed("a replay from the store", out, err)
	})
}
