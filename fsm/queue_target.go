package fsm

import (
	"fmt"
	"net/textproto"
	"strings"

	"github.com/coordd/coordd/coorderr"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// HTTP targets: a job with a target is delivered by coordd's nodes
// (package delivery) instead of being handed to pull workers. In the
// queue it differs in one place: while available it is indexed in the
// delivery lane (queueIndex.deliver) instead of its queue's, so only a
// targeted FetchJobs hands it out and a pull worker's fetch never does.
// Everything else — attempts, heartbeats, lapses, backoff, dead, cancel,
// retry and attempt tokens — is the queue's as for any job.

// Limits of a target (they only grow).
const (
	MaxTargetURLBytes     = 2048
	MaxTargetHeaders      = 16
	MaxTargetHeaderBytes  = 256 // a header's name, and its value
	MaxTargetRetryStatus  = 16
	MaxTargetSecretBytes  = 128
	DefaultTargetMethod   = "POST"
	targetSpecRules       = 3 // the first spec_rules that allow a target
	deliveryLaneQueueName = "\x00delivery"
)

// DeliveryLane is the name the node's long polls use for the delivery
// lane (a targeted fetch waits on it): not a queue name any job can have
// (queue names have no control characters).
const DeliveryLane = deliveryLaneQueueName

// TargetMethods are the methods a target may use.
var TargetMethods = []string{"POST", "PUT", "PATCH", "GET", "DELETE"}

// reservedTargetHeader says whether a header is coordd's (set on every
// delivery) or the transport's, so a target may not set it.
func reservedTargetHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "idempotency-key", "content-type", "content-length", "host", "connection", "keep-alive", "proxy-connection",
		"transfer-encoding", "te", "trailer", "upgrade", "expect":
		return true
	}
	return strings.HasPrefix(n, "coordd-") || strings.HasPrefix(n, "webhook-")
}

// checkTarget is the job-spec check of a target (CheckJobSpec's, fields
// named "target.*"): nothing here depends on time or on a server's
// configuration (the allow-list and the secrets are the API's), and no
// library parser is asked, so a logged entry replays alike whatever the
// Go version.
func checkTarget(t *fsmv1.HttpTarget, rules uint32) (field, problem string) {
	if rules < targetSpecRules {
		return "target", fmt.Sprintf("needs job-spec rules %d (this entry names %d)", targetSpecRules, rules)
	}
	u := t.GetUrl()
	lower := strings.ToLower(u)
	switch {
	case len(u) > MaxTargetURLBytes:
		return "target.url", fmt.Sprintf("is %d bytes; the limit is %d", len(u), MaxTargetURLBytes)
	case !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://"):
		return "target.url", "must be an absolute http:// or https:// URL"
	case strings.ContainsAny(u, " \t\r\n") || TextProblem(u) != "":
		return "target.url", "must not contain spaces or control characters"
	}
	if host, _, _ := strings.Cut(u[strings.Index(u, "//")+2:], "/"); host == "" || strings.Contains(host, "@") {
		return "target.url", "needs a host, and no user:password@ (put credentials in a header)"
	}
	known := false
	for _, m := range TargetMethods {
		known = known || t.GetMethod() == m
	}
	if !known {
		return "target.method", fmt.Sprintf("%q is not one of %s", t.GetMethod(), strings.Join(TargetMethods, ", "))
	}
	if len(t.GetHeaders()) > MaxTargetHeaders {
		return "target.headers", fmt.Sprintf("%d headers; the limit is %d", len(t.GetHeaders()), MaxTargetHeaders)
	}
	prev := ""
	for _, h := range t.GetHeaders() {
		name := h.GetName()
		switch {
		case name == "" || len(name) > MaxTargetHeaderBytes || len(h.GetValue()) > MaxTargetHeaderBytes:
			return "target.headers", fmt.Sprintf("header %q: names are 1 to %d bytes, values up to %d", name, MaxTargetHeaderBytes, MaxTargetHeaderBytes)
		case !headerToken(name) || textproto.CanonicalMIMEHeaderKey(name) != name:
			return "target.headers", fmt.Sprintf("header %q is not a canonical header name", name)
		case TextProblem(h.GetValue()) != "":
			return "target.headers", fmt.Sprintf("header %q: the value %s", name, TextProblem(h.GetValue()))
		case reservedTargetHeader(name):
			return "target.headers", fmt.Sprintf("header %q is set by coordd", name)
		case name <= prev:
			return "target.headers", fmt.Sprintf("header %q out of order or given twice", name)
		}
		prev = name
	}
	switch {
	case t.GetTimeoutMs() < 0 || t.GetTimeoutMs() > MaxVisibilityMs:
		return "target.timeout", fmt.Sprintf("%d ms is outside [0, %d]", t.GetTimeoutMs(), MaxVisibilityMs)
	case len(t.GetRetryStatus()) > MaxTargetRetryStatus:
		return "target.retryable_status", fmt.Sprintf("%d codes; the limit is %d", len(t.GetRetryStatus()), MaxTargetRetryStatus)
	case !ValidSecretName(t.GetSecret()):
		return "target.secret", fmt.Sprintf("a secret name is up to %d bytes of [A-Za-z0-9._-]", MaxTargetSecretBytes)
	}
	last := uint32(0)
	for _, c := range t.GetRetryStatus() {
		switch {
		case c < 400 || c > 499:
			return "target.retryable_status", fmt.Sprintf("%d is not a 4xx code (429 and 5xx are always retryable)", c)
		case c <= last:
			return "target.retryable_status", fmt.Sprintf("%d out of order or given twice", c)
		}
		last = c
	}
	return "", ""
}

// headerToken reports whether s is an RFC 9110 token.
func headerToken(s string) bool {
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)
		if !ok {
			return false
		}
	}
	return true
}

// ValidSecretName reports whether s is empty or up to MaxTargetSecretBytes
// of [A-Za-z0-9._-] (the names of --delivery-secrets).
func ValidSecretName(s string) bool {
	if len(s) > MaxTargetSecretBytes {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// CheckTarget is checkTarget by the current rules: a queue's target
// (SetQueueTarget) at the edge.
func CheckTarget(t *fsmv1.HttpTarget) (field, problem string) { return checkTarget(t, JobSpecRules) }

// FillTargetDefaults is FillJobDefaults' part for a target (the server's
// default method).
func FillTargetDefaults(t *fsmv1.HttpTarget) { fillTargetDefaults(t) }

func fillTargetDefaults(t *fsmv1.HttpTarget) {
	if t != nil && t.GetMethod() == "" {
		t.Method = DefaultTargetMethod
	}
}

// fetchTargeted hands out up to max available jobs of the delivery lane:
// higher priority first, then earlier run_at, then lower id, across
// queues.
func (s *state) fetchTargeted(cal int64, c *fsmv1.FetchJobs) any {
	res := &FetchResult{Jobs: make([]*QueueJob, 0, min(s.qidx.deliver.Len(), int(c.GetMax())))}
	for len(res.Jobs) < int(c.GetMax()) {
		head, ok := s.qidx.deliver.Min()
		if !ok {
			break
		}
		res.Jobs = append(res.Jobs, s.claim(s.qjob(head.id), cal, c.GetWorkerId(), c.GetIdentity()))
	}
	return res
}

// QueueTarget is a queue's HTTP target: the jobs submitted to it (or made
// for it by a schedule) without a target of their own get it when they
// are added. Records are immutable once stored.
type QueueTarget struct {
	Queue     string
	Target    *fsmv1.HttpTarget // shared, never written
	UpdatedBy string
	UpdatedAt int64 // calendar ms
}

func lessQueueTarget(a, b *QueueTarget) bool { return a.Queue < b.Queue }

// jobTarget is the target a job added to queue gets: its own, else the
// queue's (nil: a pull worker's job). Logs written before queue targets
// have none, so they replay as they did.
func (s *state) jobTarget(queue string, own *fsmv1.HttpTarget) *fsmv1.HttpTarget {
	if own != nil || s.qtargets.Len() == 0 {
		return own
	}
	if q, ok := s.qtargets.Get(&QueueTarget{Queue: queue}); ok {
		return q.Target
	}
	return nil
}

// setQueueTarget sets or clears a queue's target (checked by the job-spec
// rules the command names: a target needs spec_rules 3).
func (s *state) setQueueTarget(cal int64, c *fsmv1.SetQueueTarget) any {
	q := c.GetQueue()
	if q == "" || len(q) > MaxQueueNameBytes || TextProblem(q) != "" {
		return reject(coorderr.InvalidArgument, map[string]string{"field": "queue"}, "a queue name is 1 to %d bytes of UTF-8 without control characters", MaxQueueNameBytes)
	}
	if t := c.GetTarget(); t != nil {
		if field, problem := checkTarget(t, c.GetSpecRules()); field != "" {
			return reject(coorderr.InvalidArgument, map[string]string{"field": field}, "%s %s", field, problem)
		}
		rec := &QueueTarget{Queue: q, Target: t, UpdatedBy: c.GetIdentity(), UpdatedAt: cal}
		s.qtargets.ReplaceOrInsert(rec)
		return rec
	}
	s.qtargets.Delete(&QueueTarget{Queue: q})
	return (*QueueTarget)(nil)
}

// QueueTargets lists the queues' targets, by queue name (queue "": all).
func (f *FSM) QueueTargets(queue string) []QueueTarget {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []QueueTarget
	f.st.qtargets.Ascend(func(q *QueueTarget) bool {
		if queue == "" || q.Queue == queue {
			out = append(out, *q)
		}
		return true
	})
	return out
}
