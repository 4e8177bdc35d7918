package integration

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordd/coordd/api"
	"github.com/coordd/coordd/internal/testcluster"
)

// limitedCluster is one node with mutual TLS, securityACL, pprof on and
// short listener timeouts (a second: tests wait for them).
func limitedCluster(t *testing.T, mods ...func(*testcluster.Config)) (*testcluster.Node, *testcluster.Certs) {
	t.Helper()
	c, certs, _ := secureCluster(t, 1, securityACL, testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.HTTPAddr = "127.0.0.1:0"
		cfg.API.EnablePprof = true
		cfg.API.HTTPReadTimeout = time.Second
		cfg.API.GRPCConnectionTimeout = time.Second
		for _, m := range mods {
			m(cfg)
		}
	}))
	return c.WaitLeader(), certs
}

// closedWithin reads conn until it ends and reports whether the server
// closed it (EOF or reset) by the deadline.
func closedWithin(conn net.Conn, deadline time.Time) bool {
	_ = conn.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// 100 TLS connections (no client certificate needed) declaring a 4 MB
// body they never send are all closed by the HTTP read timeout; a stalled
// gRPC handshake by the connection timeout.
func TestSlowClientsAreCutByTheListenerTimeouts(t *testing.T) {
	n, certs := limitedCluster(t)
	const conns = 100
	var open []net.Conn
	cfg := certs.Client("")
	cfg.NextProtos = []string{"http/1.1"}
	for range conns {
		conn, err := tls.Dial("tcp", n.API.HTTPAddr(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "POST /v1/fence/commit HTTP/1.1\r\nHost: coordd\r\nContent-Type: application/json\r\n"+
			"Content-Length: 4000000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		open = append(open, conn)
	}
	grpcConn, err := net.Dial("tcp", n.API.GRPCAddr()) // sends nothing, not even a TLS hello
	if err != nil {
		t.Fatal(err)
	}
	defer grpcConn.Close()
	// Each was started before now: closed within the timeout from now, with
	// a margin for a loaded machine.
	deadline := time.Now().Add(time.Second + 4*time.Second)
	var wg sync.WaitGroup
	var stillOpen atomic.Int32
	for _, conn := range open {
		wg.Go(func() {
			if !closedWithin(conn, deadline) {
				stillOpen.Add(1)
			}
		})
	}
	grpcClosed := closedWithin(grpcConn, deadline)
	wg.Wait()
	if stillOpen.Load() > 0 || !grpcClosed {
		t.Fatalf("at the deadline %d of %d slow HTTP connections were still open; the silent gRPC connection closed: %v",
			stillOpen.Load(), conns, grpcClosed)
	}
}

// Request bodies are capped at api.MaxMessageBytes with 413, whether the
// size is declared or only found while reading.
func TestOversizedBodiesAre413(t *testing.T) {
	n, certs := limitedCluster(t)
	hc := httpsClient(certs.Client("ledger-api"))
	url := "https://" + n.API.HTTPAddr() + "/v1/fence/commit"
	big := `{"resource": "ledger/a", "token": "x:1", "payload": "` + strings.Repeat("A", api.MaxMessageBytes) + `"}`
	r := doJSON(t, hc, "POST", url, big) // Content-Length declared
	wantHTTP(t, "declared", r, 413, "INVALID_ARGUMENT")
	if msg, _ := r.body["message"].(string); !strings.Contains(msg, "over the limit of 4194304 bytes") {
		t.Fatalf("413 message: %v", r.body)
	}
	resp, err := hc.Post(url, "application/json", io.MultiReader(strings.NewReader(big))) // chunked: no length
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !bytes.Contains(body, []byte("over the limit")) {
		t.Fatalf("chunked: %d %s", resp.StatusCode, body)
	}
}

// With TLS, pprof answers members and admin identities only, and /metrics
// (every tenant's queue names) identities that may read everything or
// administer, unless --metrics-open.
func TestPprofAndMetricsNeedTheirIdentities(t *testing.T) {
	n, certs := limitedCluster(t)
	base := "https://" + n.API.HTTPAddr()
	for _, tc := range []struct {
		identity, path string
		status         int
	}{
		{"", "/debug/pprof/goroutine?debug=2", 401},
		{"billing-worker", "/debug/pprof/goroutine?debug=2", 403},
		{"ops", "/debug/pprof/goroutine?debug=2", 200}, // admin
		{n.ID, "/debug/pprof/", 200},                   // a member
		{"", "/metrics", 401},
		{"billing-worker", "/metrics", 403},
		{"ops", "/metrics", 200},
		{"", "/healthz", 200},
	} {
		resp, err := httpsClient(certs.Client(tc.identity)).Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%q GET %s: %d, want %d", tc.identity, tc.path, resp.StatusCode, tc.status)
		}
	}
	open, certs := limitedCluster(t, func(cfg *testcluster.Config) { cfg.API.OpenMetrics = true })
	resp, err := httpsClient(certs.Client("")).Get("https://" + open.API.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("open metrics without a certificate: %d", resp.StatusCode)
	}
}

// The HTTP write timeout does not end the console's live-update stream:
// it bounds each write, not the stream, which stays quiet past it and
// still delivers the next change (over HTTP/1.1 and HTTP/2).
func TestConsoleStreamOutlivesTheWriteTimeout(t *testing.T) {
	streamOutlivesTheWriteTimeout(t, "/ui/events?family=lease&prefix=billing/",
		func(line, _ string) bool { return line == "event: change" })
}

// streamOutlivesTheWriteTimeout opens the stream at path+proto on a node
// whose write timeout is 500 ms, over HTTP/1.1 and HTTP/2, waits three
// write timeouts, acquires the lease billing/<proto> and awaits the line
// that isChange says announces it.
func streamOutlivesTheWriteTimeout(t *testing.T, path string, isChange func(line, proto string) bool) {
	n, certs := limitedCluster(t, func(cfg *testcluster.Config) { cfg.API.HTTPWriteTimeout = 500 * time.Millisecond })
	for _, proto := range []string{"http/1.1", "h2"} {
		t.Run(proto, func(t *testing.T) {
			cfg := certs.Client("ops")
			tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: proto == "h2"}
			if proto == "http/1.1" {
				cfg.NextProtos = []string{"http/1.1"}
			}
			resp, err := (&http.Client{Transport: tr}).Get("https://" + n.API.HTTPAddr() + path + proto)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || (proto == "h2") != (resp.ProtoMajor == 2) {
				t.Fatalf("stream: %d over %s", resp.StatusCode, resp.Proto)
			}
			lines := make(chan string, 100)
			go func() {
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			time.Sleep(1500 * time.Millisecond) // quiet for three write timeouts
			acquire(t, coordAs(t, certs, n, "billing-worker"), "billing/"+proto, "w", 10*time.Second)
			deadline := time.After(5 * time.Second)
			for {
				select {
				case line, ok := <-lines:
					if !ok {
						t.Fatal("the stream ended before the change")
					}
					if isChange(line, proto) {
						return
					}
				case <-deadline:
					t.Fatal("no change within 5 s")
				}
			}
		})
	}
}
