package idemgin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/idemtest"
	"github.com/idemgen/idemgen/internal/conformance"
	"github.com/idemgen/idemgen/runtime/idemgin"
)

func TestMain(m *testing.M) { idemtest.Main(m) }

// TestConformance runs the protocol suite against the gin adapter, its
// middlewares registered through Router as generated code does.
func TestConformance(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	conformance.Run(t, conformance.Adapter{Name: "gin", Serve: func(t *testing.T, s *conformance.Service) http.Handler {
		rt := &idemgin.Runtime{Engine: s.Engine, Senders: s.Senders, MaxBodyBytes: s.MaxBodyBytes, Logger: s.Logger,
			Principal: func(c *gin.Context) (string, error) { return s.Principal(c.Request) }}
		e := gin.New()
		mws := map[string]gin.HandlerFunc{}
		path := func(route string) string { return strings.NewReplacer("{", ":", "}", "").Replace(route) }
		for _, r := range s.Routes {
			mws[r.Method+" "+path(r.Spec.Route)] = idemgin.Middleware(rt, r.Spec)
		}
		router := idemgin.Router(e, mws)
		for _, r := range s.Routes {
			handle := r.Handle
			router.Handle(r.Method, path(r.Spec.Route), func(c *gin.Context) {
				if err := handle(c.Writer, c.Request); err != nil {
					c.String(conformance.StatusOf(err), err.Error())
					c.Error(err)
				}
			})
		}
		return e
	}})
}
