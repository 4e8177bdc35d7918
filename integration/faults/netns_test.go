//go:build faults

package faults

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// netlab is a small network the test builds for itself: a hub namespace
// with a bridge, one namespace per host attached to it, and a veth from the
// test's own namespace so that the test can reach the hosts. Addresses are
// in 10.77.N.0/24 and exist only on these interfaces; everything is torn
// down at cleanup, also when the test fails.
type netlab struct {
	t      *testing.T
	id     string
	hub    string
	subnet string
	n      int
	nss    []string
	rootIf string
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func newNetlab(t *testing.T) *netlab {
	t.Helper()
	if err := exec.Command("ip", "netns", "list").Run(); err != nil {
		t.Skipf("no network namespaces here: %v", err)
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("iptables is not installed (scripts/test.sh installs it as root)")
	}
	var b [2]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	l := &netlab{t: t, id: id, hub: "cdh" + id, subnet: fmt.Sprintf("10.77.%d", int(b[0])%200+20), rootIf: "cdr" + id}
	t.Cleanup(l.teardown)
	sh(t, "ip", "netns", "add", l.hub)
	sh(t, "ip", "-n", l.hub, "link", "add", "br0", "type", "bridge")
	sh(t, "ip", "-n", l.hub, "link", "set", "br0", "up")
	// The test's own leg: rootIf here, its peer on the hub's bridge.
	sh(t, "ip", "link", "add", l.rootIf, "type", "veth", "peer", "name", "cdp"+id)
	sh(t, "ip", "link", "set", "cdp"+id, "netns", l.hub)
	sh(t, "ip", "-n", l.hub, "link", "set", "cdp"+id, "master", "br0", "up")
	sh(t, "ip", "addr", "add", l.subnet+".254/24", "dev", l.rootIf)
	sh(t, "ip", "link", "set", l.rootIf, "up")
	return l
}

// RootIP is the test's own address on the lab network.
func (l *netlab) RootIP() string { return l.subnet + ".254" }

// host adds a namespace attached to the bridge and returns its name and IP.
func (l *netlab) host() (ns, ip string) {
	l.t.Helper()
	l.n++
	ns = fmt.Sprintf("cdn%s%d", l.id, l.n)
	ip = fmt.Sprintf("%s.%d", l.subnet, l.n)
	a, b := fmt.Sprintf("cda%s%d", l.id, l.n), fmt.Sprintf("cdb%s%d", l.id, l.n)
	sh(l.t, "ip", "netns", "add", ns)
	l.nss = append(l.nss, ns)
	sh(l.t, "ip", "link", "add", a, "type", "veth", "peer", "name", b)
	sh(l.t, "ip", "link", "set", a, "netns", ns)
	sh(l.t, "ip", "link", "set", b, "netns", l.hub)
	sh(l.t, "ip", "-n", l.hub, "link", "set", b, "master", "br0", "up")
	sh(l.t, "ip", "-n", ns, "addr", "add", ip+"/24", "dev", a)
	sh(l.t, "ip", "-n", ns, "link", "set", a, "up")
	sh(l.t, "ip", "-n", ns, "link", "set", "lo", "up")
	return ns, ip
}

// drop makes ns drop all traffic from and to the given addresses.
func (l *netlab) drop(ns string, ips ...string) {
	l.t.Helper()
	for _, ip := range ips {
		sh(l.t, "ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-s", ip, "-j", "DROP")
		sh(l.t, "ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-d", ip, "-j", "DROP")
	}
}

// reject makes ns reset every TCP connection to the given addresses at
// once (a cut the client notices, rather than a silent blackhole).
func (l *netlab) reject(ns string, ips ...string) {
	l.t.Helper()
	for _, ip := range ips {
		sh(l.t, "ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-d", ip, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset")
		sh(l.t, "ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-s", ip, "-j", "DROP")
	}
}

// heal removes every rule in ns.
func (l *netlab) heal(ns string) {
	l.t.Helper()
	sh(l.t, "ip", "netns", "exec", ns, "iptables", "-F")
}

func (l *netlab) teardown() {
	for _, ns := range l.nss {
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
	_ = exec.Command("ip", "link", "del", l.rootIf).Run()
	_ = exec.Command("ip", "netns", "del", l.hub).Run()
}
