// Package tracing records the OpenTelemetry spans a rank makes for the
// requests an engine gave it with a trace (connector.Request.Context): a
// Book keeps each such request's span while the rank has the request, so
// that the machinery deep inside a rank (a reader's post, a writer's
// completion) can record a finished span as its child by request id,
// without carrying a context through its state. A request without a trace
// costs a few map lookups and records nothing.
//
// It depends only on OpenTelemetry's API: the program that installs a
// TracerProvider (or the rank's RankConfig.TracerProvider) decides whether
// spans go anywhere; otel's global default drops them.
package tracing
