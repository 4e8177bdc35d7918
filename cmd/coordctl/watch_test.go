package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// lease watch prints one line per change (or one JSON document per line),
// from an index, from now with the records first, until interrupted.
func TestLeaseWatch(t *testing.T) {
	noTLSEnv(t)
	c := testcluster.New(t, 1)
	eps := c.Endpoints()
	ctlOK(t, eps, "lease", "acquire", "t/a", "--owner", "alice", "--ttl", "30s")
	ctlOK(t, eps, "lease", "acquire", "other", "--owner", "alice", "--ttl", "30s")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut, done := ctlAsync(ctx, eps, "lease", "watch", "t/", "--from", "1")
	out.waitFor(t, "the grant", 10*time.Second, func(s string) bool {
		return strings.Contains(s, " PUT t/a owner=alice generation=1 renewals=0 expires in ")
	})
	ctlOK(t, eps, "lease", "release", "t/a", "--owner", "alice", "--generation", "1")
	out.waitFor(t, "the release", 10*time.Second, func(s string) bool {
		return strings.Contains(s, " PUT t/a owner=alice generation=1 renewals=0 released\n")
	})
	cancel()
	if code := waitExit(t, done, 10*time.Second); code != exitOK || strings.Contains(out.String(), "other") {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}

	// JSON: one WatchEvent per line; --count ends it.
	got := ctlOK(t, eps, "-o", "json", "lease", "watch", "t/", "--from", "1", "--count", "2")
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 2 {
		t.Fatalf("json lines: %q", got)
	}
	for i, l := range lines {
		e := &coordv1.WatchEvent{}
		if err := protojson.Unmarshal([]byte(l), e); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		if e.GetKey() != "t/a" || e.GetKind() != coordv1.WatchEventKind_WATCH_EVENT_KIND_PUT || e.GetIndex() == 0 ||
			e.GetLease().GetReleased() != (i == 1) {
			t.Fatalf("line %d: %v", i, e)
		}
	}

	// --initial: the records as they are now, then the changes.
	ctlOK(t, eps, "lease", "acquire", "t/b", "--owner", "bob", "--ttl", "30s")
	got = ctlOK(t, eps, "lease", "watch", "t/", "--initial", "--count", "2")
	if !strings.Contains(got, " EXISTING t/a owner=alice generation=1 renewals=0 released\n") ||
		!strings.Contains(got, " EXISTING t/b owner=bob generation=1 ") {
		t.Fatalf("initial:\n%s", got)
	}

	// Usage and a start the node no longer holds is not it.
	if r := ctl(t, eps, "lease", "watch", "t/", "--initial", "--from", "3"); r.code != exitError ||
		!strings.Contains(r.errOut, "--initial reads the records now") {
		t.Fatalf("--initial --from: exit %d %s", r.code, r.errOut)
	}
}

// A start no node holds is WATCH_INDEX_COMPACTED, with what to do.
func TestLeaseWatchCompacted(t *testing.T) {
	noTLSEnv(t)
	c := testcluster.New(t, 1, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.Node.Watch.Events = 4 }))
	eps := c.Endpoints()
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		ctlOK(t, eps, "lease", "acquire", "t/"+n, "--owner", "o", "--ttl", "30s")
	}
	r := ctl(t, eps, "lease", "watch", "t/", "--from", "1")
	if r.code != exitError || !strings.Contains(r.errOut, "WATCH_INDEX_COMPACTED") || !strings.Contains(r.errOut, "--initial") {
		t.Fatalf("exit %d\n%s", r.code, r.errOut)
	}
}
