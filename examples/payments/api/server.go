package api

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemcond"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemsig"
)

// The server's timeouts (see NewServer).
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 15 * time.Second
	WriteTimeout      = 45 * time.Second
	IdleTimeout       = 2 * time.Minute
)

// ServerConfig is what NewServer wires together.
type ServerConfig struct {
	Pool    *pgxpool.Pool
	Engine  *idem.Engine
	CardURL string
	// UnsafeFreshChargeKeys: see CreatePaymentImpl.UnsafeFreshKeys.
	UnsafeFreshChargeKeys bool
	Logger                *slog.Logger         // request logs; nil for none
	Metrics               *prometheus.Registry // served at /metrics when set
	// WebhookSecret is the secret the card network signs its webhooks
	// with (cardnet.SecretEnv). Required.
	WebhookSecret []byte
	// Retention and Lease, when set, replace those of every operation's
	// x-idempotency, for the whole process: the chaos harness's round in
	// which clients retry for longer than the service keeps their keys
	// (docs/reliability.md). Lease must stay below Retention.
	Retention, Lease time.Duration
}

// NewServer returns the payments service's echo instance: /healthz,
// /metrics, the API behind Bearer authentication, and the card network's
// webhook receiver behind its signature. Every refusal is
// problem+json, and request bodies are decoded strictly.
func NewServer(cfg ServerConfig) (*echo.Echo, error) {
	if len(cfg.WebhookSecret) == 0 {
		return nil, errors.New("api: ServerConfig.WebhookSecret is required: it verifies the card network's webhooks")
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	// A client that trickles its headers or body, or never reads the
	// answer, must not hold a connection forever. The write timeout covers
	// the longest request: a card network call (30s client timeout).
	e.Server.ReadHeaderTimeout = ReadHeaderTimeout
	e.Server.ReadTimeout = ReadTimeout
	e.Server.WriteTimeout = WriteTimeout
	e.Server.IdleTimeout = IdleTimeout
	// A panic outside the engine (the engine recovers its phases' panics)
	// becomes a 500 problem instead of ending the process.
	e.Use(middleware.Recover())
	e.HTTPErrorHandler = idemecho.HTTPErrorHandler
	e.Binder = idemecho.StrictJSONBinder{}
	e.GET("/healthz", func(c echo.Context) error {
		if err := cfg.Pool.Ping(c.Request().Context()); err != nil {
			return echo.NewHTTPError(http.StatusServiceUnavailable, "database unreachable")
		}
		return c.String(http.StatusOK, "ok\n")
	})
	if cfg.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(cfg.Metrics, promhttp.HandlerOpts{})))
	}
	svc := &Service{Pool: cfg.Pool, Cards: &cardnet.Client{URL: cfg.CardURL, HTTP: &http.Client{Timeout: 30 * time.Second}},
		UnsafeFreshChargeKeys: cfg.UnsafeFreshChargeKeys}
	rt := &idemecho.Runtime{Engine: cfg.Engine, Principal: Principal, Placement: Placement, Logger: cfg.Logger,
		Senders: map[string]idemsig.Verifier{"cardnet": &idemsig.HMAC{Header: cardnet.SignatureHeader,
			Secrets: []idemsig.Secret{{Sender: "cardnet", Key: cfg.WebhookSecret}}, Tolerance: 5 * time.Minute}}}
	if cfg.Retention > 0 {
		for _, spec := range []*idemecho.Spec{createPaymentIdempotency, createRefundIdempotency, receiveCardnetEventIdempotency} {
			spec.Operation.Policy.Retention = cfg.Retention
			if cfg.Lease > 0 {
				spec.Operation.Policy.Lease = cfg.Lease
			}
		}
	}
	// The conditional writes' preconditions are read before oapi-codegen's
	// binding, which would answer a missing one 400: 428 says what to send.
	require := func(header string) []echo.MiddlewareFunc {
		return []echo.MiddlewareFunc{echo.WrapMiddleware(idemcond.Require(header))}
	}
	err := RegisterWithOptions(e.Group("", Authenticate), svc, svc.Phases(), rt, RegisterOptions{
		OperationMiddlewares: map[string][]echo.MiddlewareFunc{"putOrder": require("If-None-Match"), "putOrderShipping": require("If-Match")},
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}
