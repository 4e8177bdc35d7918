// Package advertise checks the addresses a node advertises to the others
// (--raft-advertise-addr, --grpc-advertise-addr): a host name or IP and a
// port, kept as given, never resolved here. Peers resolve a name each time
// they dial it, so a name (a Kubernetes pod's stable DNS name) keeps
// working when the address behind it changes.
package advertise

import (
	"fmt"
	"net"
	"strconv"
)

// Check reports why addr cannot be dialled by other nodes: it must be
// host:port with a host (a name or an IP that is not unspecified, such as
// 0.0.0.0) and a port from 1 to 65535. flag names the setting in the error.
func Check(flag, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	if host == "" {
		return fmt.Errorf("%s %q: no host: give the name or address other nodes dial", flag, addr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%s %q: %s is no address to dial: give the name or address other nodes dial", flag, addr, host)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%s %q: the port must be a number from 1 to 65535", flag, addr)
	}
	return nil
}

// Unspecified reports whether a bound address (a listener's) is on the
// unspecified address (0.0.0.0, ::): bound everywhere, dialled nowhere.
func Unspecified(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}
