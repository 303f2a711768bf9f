// Command demo tells the payments story: `make demo` builds the service and
// runs this. It needs only Go and the PostgreSQL server binaries.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/idemgen/idemgen/examples/payments/demo"
)

func main() {
	server := flag.String("server", "bin/payments", "the built payments binary")
	flag.Parse()
	start := time.Now()
	if _, err := demo.Run(context.Background(), demo.Config{Server: *server, Out: os.Stdout}); err != nil {
		fmt.Fprintln(os.Stderr, "\nThe demo failed:", err)
		os.Exit(1)
	}
	fmt.Printf("(%.1fs)\n", time.Since(start).Seconds())
}
