package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/internal/testutil"
)

// requestLog records the requests coordctl sends to a scripted server.
type requestLog struct {
	mu   sync.Mutex
	reqs []proto.Message
}

func (l *requestLog) record(m proto.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, m)
}

func (l *requestLog) last() proto.Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reqs[len(l.reqs)-1]
}

func (l *requestLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.reqs)
}

// serveScripted serves the services register adds on a loopback gRPC
// server, stopped when the test ends, and returns its endpoints.
func serveScripted(t *testing.T, register func(*grpc.Server)) []string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return []string{lis.Addr().String()}
}

// goldenTranscript runs each command line against eps and compares the
// transcript ("$ coordctl …", the output, stderr and "(exit N)" when it is
// not 0, a blank line) with testdata/<name>.golden.
func goldenTranscript(t *testing.T, name string, eps []string, cmds [][]string) {
	t.Helper()
	var all bytes.Buffer
	for _, args := range cmds {
		all.WriteString("$ coordctl " + strings.Join(args, " ") + "\n")
		r := ctl(t, eps, args...)
		all.WriteString(r.out)
		if r.code != exitOK {
			fmt.Fprintf(&all, "%s(exit %d)\n", r.errOut, r.code)
		}
		all.WriteString("\n")
	}
	golden(t, name, all.Bytes())
}

// ctlJSON runs coordctl -o json and decodes its output.
func ctlJSON(t *testing.T, eps []string, args ...string) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(ctlOK(t, eps, append([]string{"-o", "json"}, args...)...)), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// wantUsageErrors requires each command line to exit with a usage error
// (exit 2) without reaching the scripted server behind log.
func wantUsageErrors(t *testing.T, eps []string, log *requestLog, cmds [][]string) {
	t.Helper()
	for _, args := range cmds {
		if r := ctl(t, eps, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", args, r.code, exitUsage, r.errOut)
		}
	}
	if n := log.count(); n != 0 {
		t.Fatalf("%d calls for usage errors", n)
	}
}

// field reads a nested field of a JSON document.
var field = testutil.Field
