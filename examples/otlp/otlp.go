// Package otlp starts the reference programs' OpenTelemetry tracing
// (examples/engine, examples/proxy): a tracer provider that exports spans
// over OTLP/HTTP (protobuf) in batches, which the programs give their
// server.Config.TracerProvider and pd.Config.TracerProvider. Tracing is
// off unless an endpoint is given, by flag or by OpenTelemetry's standard
// environment (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
// OTEL_EXPORTER_OTLP_ENDPOINT). The library itself depends only on
// OpenTelemetry's API; the SDK and the exporter are the programs' choice.
package otlp

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// FlagUsage is the -otlp-endpoint flag's usage, the same in every program.
const FlagUsage = `export OpenTelemetry traces over OTLP/HTTP to this endpoint, e.g. http://127.0.0.1:4318 (spans go to /v1/traces); empty: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT if set, else no tracing`

// Tracing is a program's tracing: Provider is nil when it is off.
type Tracing struct {
	Provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider
}

// Start starts tracing to endpoint (a URL; a bare host:port gets
// http://), or to the environment's endpoint when endpoint is empty, for
// a program that names itself service. An endpoint without a path
// gets OTLP's /v1/traces (the spans' service.name). Neither
// set: tracing is off, and Start returns a Tracing whose Provider is nil.
func Start(ctx context.Context, endpoint, service string) (*Tracing, error) {
	var opts []otlptracehttp.Option
	switch {
	case endpoint != "":
		if !strings.Contains(endpoint, "://") {
			endpoint = "http://" + endpoint
		}
		u, err := url.Parse(endpoint)
		if err != nil {
			return nil, fmt.Errorf("-otlp-endpoint %q: %w", endpoint, err)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces" // OTLP/HTTP's path for traces
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	case os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "":
		return &Tracing{}, nil
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{Provider: sdk, sdk: sdk}, nil
}

// Shutdown exports the spans not yet exported and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.sdk == nil {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}
