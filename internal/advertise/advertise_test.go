package advertise

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"localhost:7402", "coordd-0.coordd-peer.ns.svc.cluster.local:7402", "10.0.0.1:1", "[::1]:65535"} {
		if err := Check("--raft-advertise-addr", ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for addr, want := range map[string]string{
		"localhost":       "missing port",
		":7402":           "no host",
		"0.0.0.0:7402":    "0.0.0.0 is no address to dial",
		"[::]:7402":       ":: is no address to dial",
		"localhost:0":     "from 1 to 65535",
		"localhost:70000": "from 1 to 65535",
		"localhost:raft":  "from 1 to 65535",
	} {
		err := Check("--raft-advertise-addr", addr)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--raft-advertise-addr") {
			t.Errorf("%q: want an error naming the flag and %q, got %v", addr, want, err)
		}
	}
}

func TestUnspecified(t *testing.T) {
	for addr, want := range map[string]bool{"0.0.0.0:1": true, "[::]:1": true, "127.0.0.1:1": false, "localhost:1": false, "junk": false} {
		if got := Unspecified(addr); got != want {
			t.Errorf("Unspecified(%q) = %v", addr, got)
		}
	}
}
