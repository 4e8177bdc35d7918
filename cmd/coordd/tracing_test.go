package main

import (
	"context"
	"strings"
	"testing"
)

// Tracing is off without an endpoint (nil provider), on with the flag or
// the standard OTEL_EXPORTER_OTLP_ENDPOINT; a ratio outside [0, 1] is an
// error naming the flag.
func TestTracingFlags(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("COORDD_OTLP_SAMPLE_RATIO", "0.25")
	o, err := parseFlags([]string{"--otlp-insecure"})
	if err != nil {
		t.Fatal(err)
	}
	if o.tracing.ratio != 0.25 || !o.tracing.insecure || o.tracing.endpoint != "" {
		t.Fatalf("parsed %+v", o.tracing)
	}
	tp, shutdown, err := o.tracing.provider(context.Background(), "node1")
	if err != nil || tp != nil {
		t.Fatalf("no endpoint: provider %v, %v; want none (off)", tp, err)
	}
	_ = shutdown(context.Background())

	for _, tc := range []struct {
		name string
		args []string
		env  string
	}{
		{"flag", []string{"--otlp-endpoint", "127.0.0.1:4317", "--otlp-insecure"}, ""},
		{"url", []string{"--otlp-endpoint", "http://127.0.0.1:4317"}, ""},
		{"env", nil, "http://127.0.0.1:4317"},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.env)
		o, err := parseFlags(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		tp, shutdown, err := o.tracing.provider(context.Background(), "node1")
		if err != nil || tp == nil {
			t.Fatalf("%s: provider %v, %v", tc.name, tp, err)
		}
		if err := shutdown(context.Background()); err != nil {
			t.Errorf("%s: shutdown: %v", tc.name, err)
		}
	}
	for _, args := range [][]string{{"--otlp-endpoint", "127.0.0.1:4317", "--otlp-sample-ratio", "2"}, {"--otlp-sample-ratio", "-1"}} {
		o, err = parseFlags(args)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := o.tracing.provider(context.Background(), "node1"); err == nil || !strings.Contains(err.Error(), "--otlp-sample-ratio") {
			t.Fatalf("%v: %v, want an error naming --otlp-sample-ratio", args, err)
		}
	}
}
