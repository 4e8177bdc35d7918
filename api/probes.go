package api

import (
	"net/http"

	"github.com/coordd/coordd/internal/probe"
)

// /livez and /readyz, for load balancers and Kubernetes (docs/configuration.md,
// "Probes"); /healthz is the older probe (503 without a leader) and stays
// as it was. Both answer anyone, like /healthz: they say nothing a
// caller could not learn from the node's reachability.

// serveLivez: 200 while the process's loops turn, whatever the quorum.
func (s *Server) serveLivez(w http.ResponseWriter, r *http.Request) {
	probe.Write(w, r, "livez", s.node.Liveness())
}

// serveReadyz: 200 when this node serves reads and writes (a leader known,
// caught up, the API not shutting down).
func (s *Server) serveReadyz(w http.ResponseWriter, r *http.Request) {
	checks := s.node.Readiness()
	select {
	case <-s.stop:
		checks = append(checks, probe.Fail("api", "the API is shutting down"))
	default:
		checks = append(checks, probe.Pass("api"))
	}
	probe.Write(w, r, "readyz", checks)
}
