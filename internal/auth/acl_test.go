package auth

import (
	"strings"
	"testing"
)

const testACL = `
rules:
  - name: no-payroll
    deny: true
    identities: ["*"]
    ops: [lease, read]
    prefixes: [payroll/]
  - name: billing
    identities: [billing-*]
    ops: [lease, window, read]
    prefixes: [billing/, daily-close]
  - name: ledger-api
    identities: [ledger-api]
    ops: [fence]
    prefixes: [ledger/]
  - name: operators
    identities: [ops]
    ops: [admin, read]
  - name: nodes
    identities: [node*]
    node_certificates: true
    ops: [admin]
`

func TestACLAuthorize(t *testing.T) {
	a, err := ParseACL([]byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   string
		node bool // a node certificate
		op   Op
		name string
		list bool
		want Decision
	}{
		{"billing-worker", false, OpLease, "billing/close", false, Decision{true, "billing"}},
		{"billing-worker", false, OpLease, "daily-close", false, Decision{true, "billing"}},
		{"billing-worker", false, OpLease, "hr/close", false, Decision{false, DefaultDenyRule}},
		{"billing-worker", false, OpFence, "billing/close", false, Decision{false, DefaultDenyRule}},
		{"billing-worker", false, OpLease, "payroll/run", false, Decision{false, "no-payroll"}},
		{"ledger-api", false, OpFence, "ledger/store-42", false, Decision{true, "ledger-api"}},
		{"ledger-api-2", false, OpFence, "ledger/store-42", false, Decision{false, DefaultDenyRule}},
		{"ops", false, OpAdmin, "", false, Decision{true, "operators"}},
		{"ops", false, OpRead, "payroll/x", false, Decision{false, "no-payroll"}},
		// Lists: billing may list under its prefix, not everything.
		{"billing-worker", false, OpRead, "billing/", true, Decision{true, "billing"}},
		{"billing-worker", false, OpRead, "", true, Decision{false, "no-payroll"}},
		{"billing-worker", false, OpRead, "hr/", true, Decision{false, DefaultDenyRule}},
		// A deny rule covering part of a listed prefix applies.
		{"ops", false, OpRead, "", true, Decision{false, "no-payroll"}},
		{"ops", false, OpRead, "hr/", true, Decision{true, "operators"}},
		// node_certificates: a joining node's certificate matches, a
		// client certificate of the same name does not.
		{"node4", true, OpAdmin, "", false, Decision{true, "nodes"}},
		{"node4", false, OpAdmin, "", false, Decision{false, DefaultDenyRule}},
		{"ops", true, OpAdmin, "", false, Decision{true, "operators"}},
	} {
		if got := a.Authorize(Caller{Identity: tc.id, Node: tc.node}, tc.op, tc.name, tc.list); got != tc.want {
			t.Errorf("%s (node %v) %s %q list=%v: got %+v, want %+v", tc.id, tc.node, tc.op, tc.name, tc.list, got, tc.want)
		}
	}
}

func TestParseACLErrors(t *testing.T) {
	for doc, want := range map[string]string{
		"rules: [{name: a, identities: [x], ops: [write]}]":                                         `unknown op "write"`,
		"rules: [{identities: [x], ops: [read]}]":                                                   "name is required",
		"rules: [{name: a, ops: [read]}]":                                                           "identities is empty",
		"rules: [{name: a, identities: [x], ops: [read], prefix: [x]}]":                             "unknown field",
		"rules: [{name: a, identities: [x], ops: [read]}, {name: a, identities: [y], ops: [read]}]": "used twice",
		"rules: [{name: default-deny, identities: [x], ops: [read]}]":                               "reserved",
		"rules: [{name: a, identities: [x], ops: [read], node_certificates: yes please}]":           "node_certificates",
	} {
		if _, err := ParseACL([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", doc, err, want)
		}
	}
}
