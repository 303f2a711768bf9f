// Package telemetry is a service's own logger and metrics: they write to
// the process's output and memory, not to another system.
package telemetry

import (
	"fmt"
	"os"
	"time"
)

type Logger struct{ Prefix string }

func (l *Logger) Infof(format string, args ...any) {
	fmt.Fprintf(os.Stderr, l.Prefix+format+"\n", args...)
}

type Metrics struct{ observed map[string][]time.Duration }

func (m *Metrics) Observe(name string, d time.Duration) {
	if m.observed == nil {
		m.observed = map[string][]time.Duration{}
	}
	m.observed[name] = append(m.observed[name], d)
}
