// Package metriclabel gives every Prometheus label value coordd sets from
// a name one style: lower_snake_case, short. An enum's own prefix and the
// word the metric's name already says are dropped:
//
//	Value("COMMAND_TYPE_ACQUIRE", "COMMAND_TYPE_") = "acquire"
//	Value("LEASE_EXPIRED", "LEASE_")               = "expired"   (coordd_leases_lost_total)
//	Value("STALE_TOKEN")                           = "stale_token"
//	Value("Follower")                              = "follower"  (Raft's state names)
//
// Values that are data (queue names, node ids, ACL rule names, targets)
// are not names of coordd's and are left as they are.
package metriclabel

import (
	"strings"
	"unicode"
)

// Value is name as a label value: CamelCase split into words, lower
// case, the first of prefixes that it starts with (compared in any case)
// dropped.
func Value(name string, prefixes ...string) string {
	for _, p := range prefixes {
		if len(name) > len(p) && strings.EqualFold(name[:len(p)], p) {
			name = name[len(p):]
			break
		}
	}
	var b strings.Builder
	b.Grow(len(name) + 4)
	rs := []rune(name)
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1])) {
			b.WriteByte('_')
		}
		switch {
		case r == '-' || r == ' ':
			b.WriteByte('_')
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}
