package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// telemetry is the OpenTelemetry SDK of the service, when exporting is
// configured: through OTLP over HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or
// its _TRACES_ and _METRICS_ variants) is set, which the exporters read
// with the rest of the standard OTEL_* variables; to stdout when
// OTEL_TRACES_EXPORTER=console. Otherwise it is nil and the service exports
// nothing (Prometheus metrics are served at /metrics either way).
type telemetry struct {
	tp *sdktrace.TracerProvider
	mp *sdkmetric.MeterProvider
}

// exporterFromEnv names the exporter the environment asks for: "otlp",
// "console" or "" for none.
func exporterFromEnv(getenv func(string) string) (string, error) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		if getenv(v) != "" {
			return "otlp", nil
		}
	}
	switch e := getenv("OTEL_TRACES_EXPORTER"); e {
	case "", "none":
		return "", nil
	case "console", "otlp":
		return e, nil
	default:
		return "", fmt.Errorf("OTEL_TRACES_EXPORTER=%s: this service knows otlp, console and none", e)
	}
}

func newTelemetry(ctx context.Context) (*telemetry, error) {
	kind, err := exporterFromEnv(os.Getenv)
	if err != nil || kind == "" {
		return nil, err
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", "payments")))
	if err != nil {
		return nil, err
	}
	var spans sdktrace.SpanExporter
	var metrics sdkmetric.Exporter
	switch kind {
	case "otlp":
		if spans, err = otlptracehttp.New(ctx); err != nil {
			return nil, err
		}
		metrics, err = otlpmetrichttp.New(ctx)
	default:
		if spans, err = stdouttrace.New(); err != nil {
			return nil, err
		}
		metrics, err = stdoutmetric.New()
	}
	if err != nil {
		return nil, err
	}
	return &telemetry{
		tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res)),
		mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics,
			sdkmetric.WithInterval(30*time.Second))), sdkmetric.WithResource(res)),
	}, nil
}

// shutdown flushes what is buffered.
func (t *telemetry) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(t.tp.Shutdown(ctx), t.mp.Shutdown(ctx))
}

// serverSpans starts a server span per HTTP request, so that everything the
// request does (the engine's spans, the log lines written with its
// context) belongs to one trace.
func serverSpans(tp trace.TracerProvider) echo.MiddlewareFunc {
	tracer := tp.Tracer("github.com/idemgen/idemgen/examples/payments")
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			ctx, span := tracer.Start(req.Context(), req.Method+" "+c.Path(), trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("http.request.method", req.Method), attribute.String("http.route", c.Path())))
			defer span.End()
			c.SetRequest(req.WithContext(ctx))
			err := next(c)
			if err != nil {
				c.Error(err) // rendered here, so the status below is the one sent
			}
			status := c.Response().Status
			span.SetAttributes(attribute.Int("http.response.status_code", status))
			if status >= 500 {
				span.SetStatus(codes.Error, "")
			}
			return nil
		}
	}
}
