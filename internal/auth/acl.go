package auth

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Op is a family of operations an ACL rule grants or denies.
type Op string

// The operation families. A name is what the prefixes of a rule match:
// the lease name, the job of a window, the resource of a fenced commit, the
// queue of a queued job, the name a read looks up (or the prefix a list
// asks for). admin covers membership, leadership transfer and snapshots,
// and has no name.
const (
	OpLease  Op = "lease"  // Acquire, Renew, Release, KeepAlive
	OpWindow Op = "window" // ClaimWindow, CompleteWindow, RegisterJob (by job)
	OpFence  Op = "fence"  // FencedCommit, also dry runs (by resource)
	OpRead   Op = "read"   // GetLease, ListLeases, windows, resources, jobs; queue Get, List, Stats (by queue)
	OpAdmin  Op = "admin"  // AddVoter, RemoveServer, TransferLeadership, Snapshot
	OpJob    Op = "job"    // queue Submit, Cancel, Retry; schedules Put, Pause, Resume, Trigger, Delete (by queue)
	OpWork   Op = "work"   // queue Fetch (by queue); Heartbeat, Complete, Fail are bound to the fetcher
)

var knownOps = []Op{OpLease, OpWindow, OpFence, OpRead, OpAdmin, OpJob, OpWork}

// ACL is the authorization policy, read from a YAML (or JSON) file:
//
//	rules:
//	  - name: billing-jobs
//	    identities: [billing-worker]      # certificate identities; "x*" is a prefix, "*" anyone
//	    ops: [lease, window, read]
//	    prefixes: [billing/, daily-close] # names the rule covers; empty: all
//	  - name: ledger-api
//	    identities: [ledger-api]
//	    ops: [fence]
//	    prefixes: [ledger/]
//	  - name: no-payroll
//	    deny: true
//	    identities: ["*"]
//	    ops: [lease]
//	    prefixes: [payroll/]
//	  - name: operators
//	    identities: [ops-*]
//	    ops: [admin, read]
//	  - name: nodes
//	    identities: [node*]
//	    node_certificates: true           # only node certificates (coordd://node/<id>)
//	    ops: [admin]
//
// Rules are tried in order; the first whose identities, op and prefixes
// match decides (allow, or deny with deny: true). When none matches, the
// call is denied by the implicit rule "default-deny". Cluster members
// (callers with a node certificate of a Raft server, see Authenticate) are
// not subject to the ACL. A rule matches identities by name, whatever kind
// of certificate carries them, unless it says node_certificates: then it
// matches only callers whose certificate is a node certificate
// (tlsutil.NodeID: joining nodes, before they are members), never a client
// certificate of the same name.
type ACL struct {
	Rules []Rule `json:"rules"`
}

// Rule is one entry of an ACL.
type Rule struct {
	Name       string   `json:"name"`
	Identities []string `json:"identities"`
	Ops        []Op     `json:"ops"`
	Prefixes   []string `json:"prefixes,omitempty"`
	Deny       bool     `json:"deny,omitempty"`
	// NodeCertificates: the rule matches only callers presenting a node
	// certificate (Caller.Node).
	NodeCertificates bool `json:"node_certificates,omitempty"`
}

// DefaultDenyRule names the decision when no rule matched.
const DefaultDenyRule = "default-deny"

// LoadACL reads and checks an ACL file.
func LoadACL(path string) (*ACL, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	return ParseACL(data)
}

// ParseACL parses an ACL document; unknown fields and ops are errors.
func ParseACL(data []byte) (*ACL, error) {
	var a ACL
	if err := yaml.UnmarshalStrict(data, &a); err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	var errs []error
	seen := map[string]bool{}
	for i, r := range a.Rules {
		where := fmt.Sprintf("acl rule %d (%q)", i+1, r.Name)
		if r.Name == "" {
			errs = append(errs, fmt.Errorf("acl rule %d: name is required", i+1))
		} else if seen[r.Name] || r.Name == DefaultDenyRule {
			errs = append(errs, fmt.Errorf("%s: name used twice or reserved", where))
		}
		seen[r.Name] = true
		if len(r.Identities) == 0 {
			errs = append(errs, fmt.Errorf("%s: identities is empty", where))
		}
		if len(r.Ops) == 0 {
			errs = append(errs, fmt.Errorf("%s: ops is empty", where))
		}
		for _, op := range r.Ops {
			if !slices.Contains(knownOps, op) {
				errs = append(errs, fmt.Errorf("%s: unknown op %q (known: %v)", where, op, knownOps))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &a, nil
}

// Check is Authorize as an error: nil when allowed, else a
// PermissionDenied *Error naming the rule that denied.
func (a *ACL) Check(who Caller, op Op, name string, list bool) (Decision, error) {
	d := a.Authorize(who, op, name, list)
	identity := who.Identity
	if d.Allowed {
		return d, nil
	}
	what := fmt.Sprintf("%q", name)
	if list {
		what = fmt.Sprintf("names under %q", name)
	}
	if op == OpAdmin {
		what = "the cluster"
	}
	return d, &Error{Kind: PermissionDenied, Msg: fmt.Sprintf("identity %q may not %s %s (ACL rule %q)", identity, op, what, d.Rule),
		Meta: map[string]string{"identity": identity, "op": string(op), "name": name, "rule": d.Rule}}
}

// Decision is the outcome of an authorization: which rule applied.
type Decision struct {
	Allowed bool
	Rule    string
}

// Authorize decides whether the caller who (its identity, and whether its
// certificate is a node certificate) may perform op on name. With list,
// name is a prefix the caller lists: an allow rule must cover all of it,
// and a deny rule applies when it covers any part of it.
func (a *ACL) Authorize(who Caller, op Op, name string, list bool) Decision {
	for _, r := range a.Rules {
		if !slices.Contains(r.Ops, op) || !r.matchesIdentity(who) || !r.matchesName(op, name, list) {
			continue
		}
		return Decision{Allowed: !r.Deny, Rule: r.Name}
	}
	return Decision{Allowed: false, Rule: DefaultDenyRule}
}

func (r *Rule) matchesIdentity(who Caller) bool {
	if r.NodeCertificates && !who.Node {
		return false
	}
	id := who.Identity
	for _, p := range r.Identities {
		if p == "*" || p == id || (strings.HasSuffix(p, "*") && strings.HasPrefix(id, strings.TrimSuffix(p, "*"))) {
			return true
		}
	}
	return false
}

func (r *Rule) matchesName(op Op, name string, list bool) bool {
	if len(r.Prefixes) == 0 || op == OpAdmin {
		return true
	}
	for _, p := range r.Prefixes {
		if strings.HasPrefix(name, p) || (list && r.Deny && strings.HasPrefix(p, name)) {
			return true
		}
	}
	return false
}
