package api

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordd/coordd/internal/testutil"
)

// A listener whose Serve returns before Close is a failure: it is logged
// and delivered on Failed (coordd exits with it). Close's own stop is not.
func TestServeErrorsReachFailed(t *testing.T) {
	for _, lis := range []string{"gRPC", "HTTP"} {
		t.Run(lis, func(t *testing.T) {
			var logs testutil.Buffer
			cfg := Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
				Logger: slog.New(slog.NewTextHandler(&logs, nil))}.withDefaults()
			cfg.Metrics = prometheus.NewRegistry()
			s := newServer(cfg, newFakeNode())
			if err := s.start(); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if lis == "gRPC" {
				s.grpcLis.Close()
			} else {
				s.httpLis.Close()
			}
			select {
			case err := <-s.Failed():
				if !strings.Contains(err.Error(), lis+" server stopped serving") {
					t.Fatalf("Failed delivered %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the %s listener failed and Failed said nothing", lis)
			}
			if !strings.Contains(logs.String(), "the API stopped serving") {
				t.Fatalf("not logged:\n%s", logs.String())
			}
		})
	}
	t.Run("Close", func(t *testing.T) {
		cfg := Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}.withDefaults()
		cfg.Metrics = prometheus.NewRegistry()
		s := newServer(cfg, newFakeNode())
		if err := s.start(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		select {
		case err := <-s.Failed():
			t.Fatalf("Close reported as a failure: %v", err)
		default:
		}
	})
}
