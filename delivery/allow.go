package delivery

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// AllowFlag is coordd's flag that lists the hosts delivery may reach.
const AllowFlag = "--delivery-allow"

// Allow is the servers' allow-list of delivery targets: nothing is
// reachable until an operator allows it, loopback included. A pattern is
// a host name ("billing.internal"), a wildcard of its subdomains
// ("*.example.com", not example.com itself), "*" for every host name, an
// IP address ("127.0.0.1", "::1") or a CIDR prefix ("10.0.0.0/8",
// "0.0.0.0/0"). Host names match name patterns only, IP literals IP and
// CIDR patterns only; any port.
type Allow struct {
	names    map[string]bool
	suffixes []string // ".example.com"
	anyName  bool
	prefixes []netip.Prefix
	patterns []string
}

// ParseAllow reads the patterns (empty strings are skipped).
func ParseAllow(patterns []string) (*Allow, error) {
	a := &Allow{names: map[string]bool{}}
	for _, p := range patterns {
		p = strings.ToLower(strings.TrimSpace(p))
		switch {
		case p == "":
			continue
		case p == "*":
			a.anyName = true
		case strings.HasPrefix(p, "*."):
			if strings.ContainsAny(p[2:], "*/:") || p[2:] == "" {
				return nil, fmt.Errorf("%s %q: a wildcard is *.<domain>", AllowFlag, p)
			}
			a.suffixes = append(a.suffixes, p[1:])
		case strings.Contains(p, "/"):
			pfx, err := netip.ParsePrefix(p)
			if err != nil {
				return nil, fmt.Errorf("%s %q: %v", AllowFlag, p, err)
			}
			a.prefixes = append(a.prefixes, pfx.Masked())
		default:
			if ip, err := netip.ParseAddr(strings.Trim(p, "[]")); err == nil {
				a.prefixes = append(a.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				break
			}
			if strings.ContainsAny(p, "*:/ ") {
				return nil, fmt.Errorf("%s %q: want a host name, *.<domain>, an IP address or a CIDR prefix", AllowFlag, p)
			}
			a.names[p] = true
		}
		a.patterns = append(a.patterns, p)
	}
	return a, nil
}

// Empty reports whether the list allows nothing.
func (a *Allow) Empty() bool { return a == nil || len(a.patterns) == 0 }

// Host checks a host (no port; IPv6 with or without brackets): nil when
// allowed, else an error naming the flag.
func (a *Allow) Host(host string) error {
	h := strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if ip, err := netip.ParseAddr(h); err == nil {
		ip = ip.Unmap()
		for _, p := range a.prefixes {
			if p.Contains(ip) {
				return nil
			}
		}
	} else if a.names[h] || a.anyName {
		return nil
	} else {
		for _, s := range a.suffixes {
			if strings.HasSuffix(h, s) {
				return nil
			}
		}
	}
	if len(a.patterns) == 0 {
		return fmt.Errorf("host %q is not allowed: no delivery target is reachable until the servers' %s names it (a host, *.domain, an IP or a CIDR prefix)", host, AllowFlag)
	}
	return fmt.Errorf("host %q is not allowed by the servers' %s (%s)", host, AllowFlag, strings.Join(a.patterns, ", "))
}

// ParseTargetURL parses a target's URL and checks it against the list:
// http or https, a host, no user info and no fragment.
func (a *Allow) ParseTargetURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, fmt.Errorf("is not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("must be http or https, not %q", u.Scheme)
	case u.Hostname() == "":
		return nil, fmt.Errorf("needs a host")
	case u.User != nil:
		return nil, fmt.Errorf("must not carry user:password@ (put credentials in a header)")
	case u.Fragment != "":
		return nil, fmt.Errorf("must not carry a #fragment")
	}
	if err := a.Host(u.Hostname()); err != nil {
		return nil, err
	}
	return u, nil
}
