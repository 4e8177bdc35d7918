package auth

import "testing"

// FuzzParseACL: no ACL document crashes the parser, and one that parses
// authorizes without crashing.
func FuzzParseACL(f *testing.F) {
	f.Add("rules: [{name: a, identities: ['*'], ops: [lease], prefixes: ['']}]")
	f.Add("rules:\n  - name: x\n    deny: true\n    identities: [a*]\n    ops: [read, admin]\n")
	f.Add("rules: [{name: n, identities: [a*], node_certificates: true, ops: [admin]}]")
	f.Fuzz(func(t *testing.T, doc string) {
		a, err := ParseACL([]byte(doc))
		if err != nil {
			return
		}
		for _, op := range knownOps {
			a.Authorize(Caller{Identity: "a"}, op, "x", false)
			a.Authorize(Caller{Identity: "a", Node: true}, op, "x", false)
			a.Authorize(Caller{}, op, "", true)
		}
	})
}
