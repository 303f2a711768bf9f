// Command cardnet runs the fake card network as its own process.
//
//	cardnet [-addr 127.0.0.1:8090] [-latency 0s] [-fail-before 0] [-fail-after 0]
//	        [-webhook-url URL [-webhook-duplicate 0] [-webhook-refund 0]]
//
// Besides POST /charges, GET /charges and GET /events (see package cardnet),
// PUT /admin/options with {"latency":"2s","fail_before":0.1,"fail_after":0.1}
// changes its behaviour while it runs. With -webhook-url it delivers signed
// webhook events about its charges there, with the secret in
// CARDNET_WEBHOOK_SECRET.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/idemgen/idemgen/examples/payments/cardnet"
)

type adminOptions struct {
	Latency    string  `json:"latency"`
	FailBefore float64 `json:"fail_before"`
	FailAfter  float64 `json:"fail_after"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address (port 0 picks one; printed as 'listening on ADDR')")
	latency := flag.Duration("latency", 0, "added to every charge before answering")
	failBefore := flag.Float64("fail-before", 0, "probability of answering 503 without charging")
	failAfter := flag.Float64("fail-after", 0, "probability of charging and then answering 503")
	hookURL := flag.String("webhook-url", "", "deliver signed webhook events about charges to this URL (secret in "+cardnet.SecretEnv+")")
	hookDup := flag.Float64("webhook-duplicate", 0, "share of events delivered a second time on purpose, after a 2xx")
	hookRefund := flag.Float64("webhook-refund", 0, "share of succeeded charges the network refunds on its own (charge.refunded)")
	hookMin := flag.Duration("webhook-min-wait", 200*time.Millisecond, "first backoff between delivery attempts")
	hookMax := flag.Duration("webhook-max-wait", 5*time.Second, "longest backoff between delivery attempts")
	flag.Parse()
	n := cardnet.New(cardnet.Options{Latency: *latency, FailBefore: *failBefore, FailAfter: *failAfter})
	if *hookURL != "" {
		secret := os.Getenv(cardnet.SecretEnv)
		if secret == "" {
			log.Fatalf("cardnet: -webhook-url needs the signing secret in %s", cardnet.SecretEnv)
		}
		n.SetWebhooks(cardnet.Webhooks{URL: *hookURL, Secret: []byte(secret), DuplicateShare: *hookDup, RefundShare: *hookRefund,
			MinWait: *hookMin, MaxWait: *hookMax})
	}
	mux := http.NewServeMux()
	mux.Handle("/charges", n)
	mux.Handle("/events", n)
	mux.HandleFunc("PUT /admin/options", func(w http.ResponseWriter, r *http.Request) {
		var o adminOptions
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var d time.Duration
		if o.Latency != "" {
			var err error
			if d, err = time.ParseDuration(o.Latency); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		n.SetOptions(cardnet.Options{Latency: d, FailBefore: o.FailBefore, FailAfter: o.FailAfter})
		w.WriteHeader(http.StatusNoContent)
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	log.Fatal(http.Serve(ln, mux))
}
