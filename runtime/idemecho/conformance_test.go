package idemecho_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/internal/conformance"
	"github.com/idemgen/idemgen/runtime/idemecho"
)

// TestConformance runs the protocol suite against the echo adapter, with
// echo's error chain and idemecho's HTTPErrorHandler.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Adapter{Name: "echo", Serve: func(t *testing.T, s *conformance.Service) http.Handler {
		rt := &idemecho.Runtime{Engine: s.Engine, Senders: s.Senders, MaxBodyBytes: s.MaxBodyBytes, Logger: s.Logger,
			Principal: func(c echo.Context) (string, error) { return s.Principal(c.Request()) }}
		e := echo.New()
		e.HTTPErrorHandler = idemecho.HTTPErrorHandler
		for _, r := range s.Routes {
			handle := r.Handle
			path := strings.NewReplacer("{", ":", "}", "").Replace(r.Spec.Route)
			e.Add(r.Method, path, func(c echo.Context) error {
				if err := handle(c.Response(), c.Request()); err != nil {
					return echo.NewHTTPError(conformance.StatusOf(err), err.Error()).SetInternal(err)
				}
				return nil
			}, idemecho.Middleware(rt, r.Spec))
		}
		return e
	}})
}
