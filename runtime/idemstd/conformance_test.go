package idemstd_test

import (
	"net/http"
	"testing"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/internal/conformance"
	"github.com/idemgen/idemgen/runtime/idemstd"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

// TestConformance runs the protocol suite against the net/http adapter on
// the standard library's ServeMux.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Adapter{Name: "net/http", Serve: func(t *testing.T, s *conformance.Service) http.Handler {
		rt := &idemstd.Runtime{Engine: s.Engine, Principal: s.Principal, Senders: s.Senders, MaxBodyBytes: s.MaxBodyBytes, Logger: s.Logger}
		mux := http.NewServeMux()
		for _, r := range s.Routes {
			handle := r.Handle
			h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if err := handle(w, req); err != nil {
					http.Error(w, err.Error(), conformance.StatusOf(err))
				}
			})
			mux.Handle(r.Method+" "+r.Spec.Route, idemstd.Middleware(rt, r.Spec)(h))
		}
		return mux
	}})
}
