package main

import (
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/testcluster"
)

// With 2 of 3 nodes down, status says that nothing can commit: the
// survivor is "Leader (no majority)" for the moment before it steps down,
// then a follower that knows no leader; a warning says either.
func TestStatusWithoutMajority(t *testing.T) {
	noTLSEnv(t)
	c := testcluster.New(t, 3)
	c.WaitLeader()
	eps := c.Endpoints()
	for _, f := range c.Followers() {
		c.Stop(f)
	}
	r := ctl(t, eps, "--timeout", "2s", "status")
	if r.code != exitError || !strings.Contains(r.out, "\nwarning: ") ||
		!(strings.Contains(r.out, "Leader (no majority)") || strings.Contains(r.out, "no node that answered leads or knows a leader")) {
		t.Fatalf("exit %d:\n%s%s", r.code, r.out, r.errOut)
	}
}
