package main

import "testing"

// TestExporterFromEnv: the service exports only when the environment says
// so, to the OTLP endpoint when one is named, and refuses an exporter it
// does not know rather than exporting nothing silently.
func TestExporterFromEnv(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
		bad  bool
	}{
		{env: nil, want: ""},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, want: ""},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, want: "console"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: "otlp"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, want: "otlp"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, bad: true},
	} {
		got, err := exporterFromEnv(func(k string) string { return c.env[k] })
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("%v: %q, %v; want %q (error: %t)", c.env, got, err, c.want, c.bad)
		}
	}
}
