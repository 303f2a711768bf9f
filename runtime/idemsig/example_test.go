package idemsig_test

import (
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgen/idemgen/runtime/idemsig"
)

// A sender signs each delivery attempt; the receiver's verifier returns the
// sender whose secret signed it.
func ExampleHMAC() {
	secret := []byte("whsec_shared_with_the_sender")
	body := []byte(`{"id":"evt_1","type":"charge.succeeded"}`)

	// The sender, on every attempt:
	req, _ := http.NewRequest("POST", "https://payments.example/webhooks/cardnet", bytes.NewReader(body))
	req.Header.Set("Cardnet-Signature", idemsig.Sign(time.Now(), body, secret))

	// The receiver (idemecho calls this for scope sender:cardnet):
	v := &idemsig.HMAC{Header: "Cardnet-Signature", Secrets: []idemsig.Secret{{Sender: "cardnet", Key: secret}}}
	sender, err := v.Verify(req, body)
	fmt.Println(sender, err)

	req.Header.Set("Cardnet-Signature", idemsig.Sign(time.Now(), body, []byte("a guess")))
	_, err = v.Verify(req, body)
	fmt.Println(err)
	// Output:
	// cardnet <nil>
	// invalid signature: Cardnet-Signature: no v1 signature matches the body
}
