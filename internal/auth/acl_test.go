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
`

func TestACLAuthorize(t *testing.T) {
	a, err := ParseACL([]byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   string
		op   Op
		name string
		list bool
		want Decision
	}{
		{"billing-worker", OpLease, "billing/close", false, Decision{true, "billing"}},
		{"billing-worker", OpLease, "daily-close", false, Decision{true, "billing"}},
		{"billing-worker", OpLease, "hr/close", false, Decision{false, DefaultDenyRule}},
		{"billing-worker", OpFence, "billing/close", false, Decision{false, DefaultDenyRule}},
		{"billing-worker", OpLease, "payroll/run", false, Decision{false, "no-payroll"}},
		{"ledger-api", OpFence, "ledger/store-42", false, Decision{true, "ledger-api"}},
		{"ledger-api-2", OpFence, "ledger/store-42", false, Decision{false, DefaultDenyRule}},
		{"ops", OpAdmin, "", false, Decision{true, "operators"}},
		{"ops", OpRead, "payroll/x", false, Decision{false, "no-payroll"}},
		// Lists: billing may list under its prefix, not everything.
		{"billing-worker", OpRead, "billing/", true, Decision{true, "billing"}},
		{"billing-worker", OpRead, "", true, Decision{false, "no-payroll"}},
		{"billing-worker", OpRead, "hr/", true, Decision{false, DefaultDenyRule}},
		// A deny rule covering part of a listed prefix applies.
		{"ops", OpRead, "", true, Decision{false, "no-payroll"}},
		{"ops", OpRead, "hr/", true, Decision{true, "operators"}},
	} {
		if got := a.Authorize(tc.id, tc.op, tc.name, tc.list); got != tc.want {
			t.Errorf("%s %s %q list=%v: got %+v, want %+v", tc.id, tc.op, tc.name, tc.list, got, tc.want)
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
	} {
		if _, err := ParseACL([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", doc, err, want)
		}
	}
}
