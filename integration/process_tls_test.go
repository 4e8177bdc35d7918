package integration

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/internal/framework"
	"github.com/coordd/coordd/internal/proccluster"
	"github.com/coordd/coordd/internal/testcluster"
	"github.com/coordd/coordd/internal/tlsutil"
)

// Real coordd processes with mutual TLS (Raft, gRPC, HTTP) and an ACL:
// the SDK and coordctl work with certificates, strangers are refused, the
// ACL reloads on SIGHUP, and the HTTP API answers over TLS.
func TestProcessClusterMutualTLS(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	certs := testcluster.NewCerts(t)
	aclPath := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(aclPath, []byte(securityACL), 0o600); err != nil {
		t.Fatal(err)
	}
	pc := proccluster.StartTLS(t, coorddBin, 3, func(id string) tlsutil.Files { return certs.Files(id, true) },
		"--acl-file", aclPath)
	pc.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The SDK with a certificate: a lease kept alive across renewals.
	bf := certs.Files("billing-worker", false)
	billing := framework.Client(t, pc, client.WithTLSFiles(bf.Cert, bf.Key, bf.CA))
	l, err := billing.Acquire(ctx, "billing/close", 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Three TTLs later it is still held (renewed over the TLS stream).
	select {
	case <-l.Context().Done():
		t.Fatalf("lease lost: %v", context.Cause(l.Context()))
	case <-time.After(4500 * time.Millisecond):
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Denied by the ACL, with the rule named.
	_, err = billing.Acquire(ctx, "hr/close", 2*time.Second)
	var ce *client.Error
	if !errors.Is(err, client.ErrPermissionDenied) || !errors.As(err, &ce) || ce.Metadata["rule"] != "default-deny" {
		t.Fatalf("acquire outside the ACL: %v", err)
	}
	// No certificate: refused at the handshake, reported at once.
	anon := framework.Client(t, pc, client.WithTLSFiles("", "", bf.CA))
	if _, err := anon.Acquire(ctx, "billing/x", 2*time.Second); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("anonymous client: %v", err)
	}

	// coordctl with certificates.
	ctlAs := func(identity string) ctl {
		f := certs.Files(identity, false)
		return ctl{t: t, endpoints: strings.Join(pc.Endpoints(), ","), extra: []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}}
	}
	if out := ctlAs("ops").ok("lease", "list"); !strings.Contains(out, "billing/close") {
		t.Fatalf("ops lease list: %s", out)
	}
	_, errOut, code := ctlAs("billing-worker").run("snapshot")
	if code != 1 || !strings.Contains(errOut, "PERMISSION_DENIED") || !strings.Contains(errOut, "rule=default-deny") {
		t.Fatalf("billing snapshot: exit %d: %s", code, errOut)
	}
	_, errOut, code = ctl{t: t, endpoints: strings.Join(pc.Endpoints(), ",")}.run("status")
	if code != 1 {
		t.Fatalf("plaintext coordctl against a TLS cluster: exit %d: %s", code, errOut)
	}

	// SIGHUP reloads the ACL on every node.
	if err := os.WriteFile(aclPath, []byte(securityACL+`
  - name: billing-snapshots
    identities: [billing-worker]
    ops: [admin]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, nd := range pc.Nodes {
		pc.Signal(nd, syscall.SIGHUP)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, errOut, code = ctlAs("billing-worker").run("snapshot")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot still refused after SIGHUP: %s", errOut)
		}
		time.Sleep(100 * time.Millisecond) // the signal is handled asynchronously
	}

	// The HTTP API over TLS: a lease lookup by ops; /healthz without a
	// client certificate.
	opsHTTP := httpsClient(certs.Client("ops"))
	r := doJSON(t, opsHTTP, "GET", "https://"+pc.Nodes[0].HTTPAddr+"/v1/leases/billing/close", nil)
	if r.status != http.StatusOK || r.body["lease"].(map[string]any)["identity"] != "billing-worker" {
		t.Fatalf("HTTP lease lookup: %d %v", r.status, r.body)
	}
	resp, err := httpsClient(certs.Client("")).Get("https://" + pc.Nodes[0].HTTPAddr + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
}
