// Command payments is the idemgen flagship example: a payments service whose
// POST /payments never charges a card twice.
//
//	payments [-addr 127.0.0.1:8080] [-card-url URL] [-card-latency 0s] [-mail-sink FILE]
//
// DATABASE_URL names the PostgreSQL database; without it the service starts
// a throwaway cluster from the local PostgreSQL binaries. Without -card-url it
// runs the fake card network in-process, which sends its webhooks to this
// service. CARDNET_WEBHOOK_SECRET is the secret the card network signs its
// webhooks with (POST /webhooks/cardnet); it is required with -card-url, and
// a random one is shared with the in-process network otherwise. It logs JSON lines (log/slog),
// serves Prometheus metrics at /metrics and readiness at /healthz, and shuts
// down gracefully on SIGTERM or SIGINT.
//
// OpenTelemetry is off unless configured: with OTEL_EXPORTER_OTLP_ENDPOINT
// set, spans and metrics go to that OTLP/HTTP endpoint (the exporters read
// the other standard OTEL_* variables too); with OTEL_TRACES_EXPORTER=console
// they are printed to stdout. Log lines written during a traced request
// carry its trace_id and span_id.
//
// -async-claim-commit and -separate-claim set idem.Options.AsyncClaimCommit
// and every operation's Policy.Claim to idem.ClaimSeparate, for measuring
// them (see docs/runtime.md).
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/examples/payments/cardnet"
	"github.com/idemgen/idemgen/examples/payments/outbox"
	"github.com/idemgen/idemgen/pglocal"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemapi"
	"github.com/idemgen/idemgen/runtime/idemmigrate"
	"github.com/idemgen/idemgen/runtime/idemotel"
	"github.com/idemgen/idemgen/runtime/idemprom"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address (port 0 picks a free one)")
	cardURL := flag.String("card-url", "", "card network base URL (default: an in-process fake)")
	cardLatency := flag.Duration("card-latency", 0, "latency of the in-process fake card network")
	unsafeKeys := flag.Bool("unsafe-fresh-charge-keys", false, "send the card network a new key per attempt instead of the derived one (breaks exactly-once; for the chaos harness's self-check)")
	sinkPath := flag.String("mail-sink", filepath.Join(os.TempDir(), "payments-mail.jsonl"), "file the outbox relay delivers receipts to")
	asyncClaim := flag.Bool("async-claim-commit", false, "commit claims that commit alone with synchronous_commit=off (idem.Options.AsyncClaimCommit)")
	separateClaim := flag.Bool("separate-claim", false, "commit every operation's claim on its own, before its first phase (idem.ClaimSeparate)")
	retention := flag.Duration("retention", 0, "replace every operation's retention (for the chaos harness's round whose clients retry past it; 0 keeps the spec's)")
	lease := flag.Duration("lease", 0, "with -retention, replace every operation's lease too")
	pgData := flag.String("pgdata", filepath.Join(".idemgen", "postgres"), "without DATABASE_URL: the directory of the local PostgreSQL, created on first use and kept")
	flag.Parse()
	log := slog.New(idemotel.LogHandler(slog.NewJSONHandler(os.Stderr, nil)))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		// A local PostgreSQL whose data outlives this process: a retry
		// after a restart must find the first attempt's record.
		env, err := pglocal.Persistent(ctx, *pgData, "payments", pglocal.Options{})
		if err != nil {
			return fmt.Errorf("DATABASE_URL is not set, and the local PostgreSQL in %s did not start: %w", *pgData, err)
		}
		defer env.Close()
		log.Info("DATABASE_URL is not set: a local PostgreSQL keeps the records across restarts; delete its directory to start afresh",
			"dir", env.Cluster.DataDir())
		dbURL = env.URL
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := idemmigrate.New(pool, idem.DefaultSchema).Up(ctx); err != nil {
		return fmt.Errorf("migrating the idempotency store: %w", err)
	}
	if err := api.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrating the payments tables: %w", err)
	}

	secret := []byte(os.Getenv(cardnet.SecretEnv))
	var cards *cardnet.Network
	if *cardURL == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		cards = cardnet.New(cardnet.Options{Latency: *cardLatency})
		defer cards.Close()
		srv := &http.Server{Handler: cards}
		go srv.Serve(ln)
		defer srv.Close()
		*cardURL = "http://" + ln.Addr().String()
		if len(secret) == 0 {
			secret = make([]byte, 32)
			rand.Read(secret)
		}
		log.Info("in-process card network", "url", *cardURL)
	}
	if len(secret) == 0 {
		return fmt.Errorf("set %s to the secret the card network at %s signs its webhooks with", cardnet.SecretEnv, *cardURL)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	prom, err := idemprom.New(reg)
	if err != nil {
		return err
	}
	// The store's replication lag, read from the primary at each scrape
	// (docs/operations.md, "Replication lag").
	reg.MustRegister(idemprom.NewReplicationCollector(pool))
	observers := []idem.Observer{prom}
	var tracer idem.Tracer
	tel, err := newTelemetry(ctx)
	if err != nil {
		return fmt.Errorf("OpenTelemetry: %w", err)
	}
	if tel != nil {
		defer tel.shutdown()
		otelObs, err := idemotel.New(tel.tp, tel.mp)
		if err != nil {
			return err
		}
		if _, err := idemotel.ObserveReplication(tel.mp, pool); err != nil {
			return err
		}
		observers, tracer = append(observers, otelObs), otelObs
	}
	claim := idem.ClaimAuto
	if *separateClaim {
		claim = idem.ClaimSeparate
	}
	eng, err := idem.New(pool, idem.Options{Observer: eventLog{log, idem.Observers(observers...)}, Tracer: tracer, Logger: log,
		Contract: idemapi.Contract{PolicyURL: "/openapi.idempotent.yaml"}, AsyncClaimCommit: *asyncClaim, Claim: claim})
	if err != nil {
		return err
	}

	e, err := api.NewServer(api.ServerConfig{Pool: pool, Engine: eng, CardURL: *cardURL,
		UnsafeFreshChargeKeys: *unsafeKeys, Logger: log, Metrics: reg, WebhookSecret: secret, Retention: *retention, Lease: *lease})
	if err != nil {
		return err
	}
	if tel != nil {
		e.Use(serverSpans(tel.tp))
	}

	relay := &outbox.Relay{Pool: pool, Sink: &outbox.Sink{Path: *sinkPath}, Log: log}
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	go relay.Run(bg, 200*time.Millisecond)
	go func() { // prune records past retention, at the pace measured beside claims
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			if _, err := idemadmin.Prune(bg, eng, idemadmin.PruneBesideClaims); err != nil && bg.Err() == nil {
				log.Warn("prune", "err", err)
			}
			select {
			case <-bg.Done():
				return
			case <-t.C:
			}
		}
	}()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	e.Listener = ln
	if cards != nil {
		cards.SetWebhooks(cardnet.Webhooks{URL: "http://" + ln.Addr().String() + api.WebhookRoute, Secret: secret})
	}
	fmt.Printf("listening on %s\n", ln.Addr()) // harnesses read this line
	log.Info("payments service ready", "addr", ln.Addr().String(), "mail_sink", *sinkPath)
	errc := make(chan error, 1)
	go func() { errc <- e.Start("") }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-ctx.Done():
		log.Info("shutting down: finishing in-flight requests")
		shut, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := e.Shutdown(shut); err != nil {
			return err
		}
	}
	stopBG()
	log.Info("stopped")
	return nil
}

// eventLog logs the engine events an operator wants to see one by one
// (recoveries and refusals), with the request's context (its trace), and
// passes every event on to next.
type eventLog struct {
	log  *slog.Logger
	next idem.ContextObserver
}

func (l eventLog) Observe(ev idem.Event) { l.ObserveContext(context.Background(), ev) }

func (l eventLog) ObserveContext(ctx context.Context, ev idem.Event) {
	switch {
	case ev.Kind == idem.EventPhase && ev.Err != nil:
		// Why a phase failed, beside the engine's own failure line.
		l.log.InfoContext(ctx, "idem event", "event", string(ev.Kind), "operation", ev.Operation, "phase", ev.Phase, "err", ev.Err.Error())
	case ev.Kind == idem.EventTakeover, ev.Kind == idem.EventFenced, ev.Kind == idem.EventResume, ev.Kind == idem.EventAmbiguous, ev.Kind == idem.EventRelease:
		l.log.InfoContext(ctx, "idem event", "event", string(ev.Kind), "operation", ev.Operation)
	}
	l.next.ObserveContext(ctx, ev)
}
