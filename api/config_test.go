package api

import (
	"testing"

	"github.com/coordd/coordd/internal/auth"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Cluster.Config answers the settings coordd gave the API (already
// redacted there), and only to admins when an ACL is on.
func TestClusterConfig(t *testing.T) {
	n := newFakeNode()
	s := newTestServer(t, n)
	s.cfg.ConfigFile = "/etc/coordd/coordd.yaml"
	s.cfg.Settings = []Setting{{Name: "delivery-secrets", Value: "<redacted>", Source: "file"}, {Name: "id", Value: "n1", Source: "flag"}}
	resp, err := (&cluster{s: s}).Config(caller("ops"), &coordv1.ConfigRequest{})
	if err != nil || resp.GetFile() != "/etc/coordd/coordd.yaml" || len(resp.GetSettings()) != 2 ||
		resp.GetSettings()[0].GetValue() != "<redacted>" || resp.GetSettings()[1].GetSource() != "flag" {
		t.Fatalf("%v %v", resp, err)
	}
	useACL(t, s, `
rules:
  - name: reader
    identities: [viewer]
    ops: [read]
    prefixes: [""]
  - name: operators
    identities: [ops]
    ops: [admin]
`)
	if err := s.authorizeMethod(authCaller("viewer"), coordv1.Cluster_Config_FullMethodName, &coordv1.ConfigRequest{}); err == nil {
		t.Fatal("a reader may see the configuration")
	}
	if err := s.authorizeMethod(authCaller("ops"), coordv1.Cluster_Config_FullMethodName, &coordv1.ConfigRequest{}); err != nil {
		t.Fatalf("an admin: %v", err)
	}
}

func authCaller(id string) auth.Caller { return auth.Caller{Identity: id} }
