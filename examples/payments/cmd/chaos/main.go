// Command chaos runs a chaos round against the payments example and prints
// its figures; `make chaos` runs the long round. It exits 1 when the
// promise was broken (duplicates or losses), printing the seed and the
// offending intents.
//
// With -prometheus (a Prometheus server binary), the round runs one beside
// the services with the project's alert rules, prints the signals and the
// alerts pending or firing beside its verdict, and exits 3 when an alert
// did not do what the round's kind says: a normal round fires none of the
// alerts of keys minted per attempt or of retries past the retention;
// -unsafe-client-keys fires IdemgenKeyMintedPerAttempt; -retention shorter
// than the clients' retries fires IdemgenIntentPastRetention and
// IdemgenReplayNearRetention.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/idemgen/idemgen/examples/payments/chaos"
)

func main() {
	cfg := chaos.Config{Out: os.Stderr}
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the fault schedule and the clients' choices")
	flag.IntVar(&cfg.Clients, "clients", 25, "concurrent clients")
	flag.IntVar(&cfg.RetryableClients, "retryable-clients", 2, "of which send through go-retryablehttp (with idemclient's retry policy)")
	flag.IntVar(&cfg.Intents, "intents", 200, "intents per client")
	flag.DurationVar(&cfg.Think, "think", 300*time.Millisecond, "pause between a client's intents")
	flag.IntVar(&cfg.Kills, "kills", 50, "SIGKILLs of service processes")
	flag.IntVar(&cfg.ConnFaults, "conn-faults", 200, "database connection cuts and resets")
	flag.IntVar(&cfg.PGRestarts, "pg-restarts", 1, "PostgreSQL restarts")
	flag.IntVar(&cfg.SlowCard, "slow-card", 5, "windows with the card network slower than the lease")
	flag.Float64Var(&cfg.DropRate, "drop", 0.02, "share of responses dropped after the service answered")
	flag.Float64Var(&cfg.RefundShare, "refunds", 0.25, "share of succeeded payments then refunded by 3 concurrent refunds under different keys")
	flag.DurationVar(&cfg.Progress, "progress", 5*time.Second, "how often to print progress")
	flag.Float64Var(&cfg.CardFailAfter, "card-fail-after", 0.03, "share of charges answered 503 after they were made")
	flag.DurationVar(&cfg.FaultEvery, "fault-every", time.Second, "mean pause between faults")
	flag.DurationVar(&cfg.Deadline, "deadline", 15*time.Minute, "for all intents to be answered")
	flag.BoolVar(&cfg.Webhooks, "webhooks", true, "the card network delivers signed webhooks for its charges; the checker counts their applications")
	flag.Float64Var(&cfg.WebhookDuplicates, "webhook-duplicates", 0.1, "share of webhook events delivered a second time on purpose")
	flag.Float64Var(&cfg.WebhookRefunds, "webhook-refunds", 0.1, "share of charges the card network refunds on its own (charge.refunded)")
	flag.BoolVar(&cfg.UnsafeKeys, "unsafe-keys", false, "send a fresh card key per attempt: the checker must find duplicates")
	flag.BoolVar(&cfg.UnsafeClientKeys, "unsafe-client-keys", false, "clients send a fresh Idempotency-Key per attempt: the checker must find duplicates")
	flag.StringVar(&cfg.PaymentsBin, "payments", "bin/payments", "the payments binary")
	flag.StringVar(&cfg.CardnetBin, "cardnet", "bin/cardnet", "the cardnet binary")
	flag.StringVar(&cfg.Dir, "dir", "", "keep logs and the mail sink here (default: a temp dir, removed)")
	flag.StringVar(&cfg.Prometheus, "prometheus", "", "a Prometheus server binary: evaluate the alert rules on the services' series and check them (see above)")
	flag.StringVar(&cfg.Rules, "rules", "../deploy/prometheus/idemgen-rules.yaml", "the alert rules, with -prometheus")
	retention := flag.Duration("retention", 0, "replace every operation's retention in the services (a round whose clients retry past it; duplicates are then expected)")
	lease := flag.Duration("lease", 0, "with -retention, replace every operation's lease")
	flag.Parse()
	if *retention > 0 {
		cfg.ServiceArgs = append(cfg.ServiceArgs, "-retention", retention.String())
		if *lease > 0 {
			cfg.ServiceArgs = append(cfg.ServiceArgs, "-lease", lease.String())
		}
	}
	cfg.Seed = *seed
	fmt.Fprintf(os.Stderr, "chaos: seed %d, %d intents (%d clients x %d)\n", cfg.Seed, cfg.Clients*cfg.Intents, cfg.Clients, cfg.Intents)
	rep, err := chaos.Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	fmt.Print(rep.Table())
	alertsOK := true
	if cfg.Prometheus != "" {
		alertsOK = checkAlerts(rep, cfg.UnsafeClientKeys, *retention > 0)
	}
	if !rep.OK() {
		fmt.Printf("\nBROKEN PROMISE (seed %d). Offending intents:\n", rep.Seed)
		for _, p := range rep.Problems {
			fmt.Println("  " + p)
		}
		os.Exit(1)
	}
	if !alertsOK {
		os.Exit(3)
	}
	fmt.Println("\nexactly once: no duplicates, no losses, no payment refunded beyond its amount, every webhook event applied once")
}

// checkAlerts says, for each alert the round's kind decides, whether it did
// what it must, and reports whether all did.
func checkAlerts(rep *chaos.Report, mintedKeys, shortRetention bool) bool {
	want := map[string]bool{
		"IdemgenKeyMintedPerAttempt": mintedKeys,
		"IdemgenIntentPastRetention": shortRetention,
		"IdemgenReplayNearRetention": shortRetention,
	}
	ok := true
	fmt.Println()
	for _, name := range []string{"IdemgenKeyMintedPerAttempt", "IdemgenIntentPastRetention", "IdemgenReplayNearRetention"} {
		got := rep.Active(name)
		verdict := "ok"
		if got != want[name] {
			verdict, ok = "WRONG", false
		}
		fmt.Printf("alert %-28s active %-5t want %-5t %s\n", name, got, want[name], verdict)
	}
	return ok
}
