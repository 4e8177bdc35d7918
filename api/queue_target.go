package api

import (
	"context"
	"fmt"
	"net/textproto"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordd/coordd/delivery"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// HTTP targets at the edge (docs/delivery.md): the wire form becomes the
// FSM's (headers canonical and sorted, the timeout in ms, the method
// upper-case), checked by fsm.CheckJobSpec like every job field; what
// depends on this server's configuration — the allow-list
// (--delivery-allow) and the secret names (--delivery-secrets) — is
// checkDelivery's.

// wireTarget converts a target (nil: none), or names the field and what
// is wrong with it.
func wireTarget(t *coordv1.HttpTarget) (out *fsmv1.HttpTarget, field, problem string) {
	if t == nil {
		return nil, "", ""
	}
	out = &fsmv1.HttpTarget{Url: t.GetUrl(), Method: strings.ToUpper(t.GetMethod()), Secret: t.GetSecret()}
	if d := t.GetTimeout(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			return nil, "target.timeout", "must be a duration of at least 0"
		}
		out.TimeoutMs = (d.AsDuration() + time.Millisecond - 1).Milliseconds() // whole ms, rounded up
	}
	for k, v := range t.GetHeaders() {
		out.Headers = append(out.Headers, &fsmv1.HttpHeader{Name: textproto.CanonicalMIMEHeaderKey(k), Value: v})
	}
	slices.SortFunc(out.Headers, func(a, b *fsmv1.HttpHeader) int { return strings.Compare(a.GetName(), b.GetName()) })
	for i := 1; i < len(out.Headers); i++ {
		if out.Headers[i].GetName() == out.Headers[i-1].GetName() {
			return nil, "target.headers", fmt.Sprintf("header %q given twice", out.Headers[i].GetName())
		}
	}
	out.RetryStatus = slices.Compact(slices.Sorted(slices.Values(t.GetRetryableStatus())))
	return out, "", ""
}

// targetToProto is a stored target as answered (the secret's name only:
// the servers never hold a key in the log, and never return one).
func targetToProto(t *fsmv1.HttpTarget) *coordv1.HttpTarget {
	if t == nil {
		return nil
	}
	out := &coordv1.HttpTarget{Url: t.GetUrl(), Method: t.GetMethod(), RetryableStatus: t.GetRetryStatus(), Secret: t.GetSecret()}
	if t.GetTimeoutMs() > 0 {
		out.Timeout = durationpb.New(time.Duration(t.GetTimeoutMs()) * time.Millisecond)
	}
	if len(t.GetHeaders()) > 0 {
		out.Headers = make(map[string]string, len(t.GetHeaders()))
		for _, h := range t.GetHeaders() {
			out.Headers[h.GetName()] = h.GetValue()
		}
	}
	return out
}

// checkDelivery checks a spec's target against this server's delivery
// configuration: the URL on the allow-list, the secret configured.
func (s *Server) checkDelivery(t *fsmv1.HttpTarget) (field, problem string) {
	if t == nil {
		return "", ""
	}
	if _, err := s.deliveryAllow().ParseTargetURL(t.GetUrl()); err != nil {
		return "target.url", err.Error()
	}
	if name := t.GetSecret(); name != "" && len(s.cfg.Delivery.Secrets[name]) == 0 {
		return "target.secret", fmt.Sprintf("no secret %q is configured on the servers (%s)", name, delivery.SecretsFlag)
	}
	return "", ""
}

// deliveryAllow is the configured allow-list (an empty one allows nothing).
func (s *Server) deliveryAllow() *delivery.Allow {
	if a := s.cfg.Delivery.Allow; a != nil {
		return a
	}
	a, _ := delivery.ParseAllow(nil)
	return a
}

// checkTargetedFetch refuses a delivery fetch by anyone but a member
// (coordd's own nodes) when calls are authenticated, and one that names
// queues.
func (s *Server) checkTargetedFetch(ctx context.Context, req *coordv1.QueueFetchRequest) error {
	if !req.GetTargeted() {
		return nil
	}
	if len(req.GetQueues()) > 0 {
		return invalidArg("queues", "a targeted fetch names no queues (it takes the delivery lane of every queue)")
	}
	if c := auth.CallerOf(ctx); s.authEnabled() && !c.Member {
		return &auth.Error{Kind: auth.PermissionDenied, Msg: "targeted fetches are coordd's own delivery: cluster members only"}
	}
	return nil
}

// maxDeliveryLatency bounds a reported delivery latency: a request's
// timeout is at most fsm.MaxVisibilityMs (24 h), and an hour more covers
// reading a cut body and a slow report.
const maxDeliveryLatency = fsm.MaxVisibilityMs*time.Millisecond + time.Hour

// checkDeliveryReport checks item i's delivery status and latency (a
// completion's or failure's): only coordd's deliverers report them (cluster
// members, when calls are authenticated), a status is an HTTP one.
func (s *Server) checkDeliveryReport(ctx context.Context, i int, status uint32, latency *durationpb.Duration) error {
	if status == 0 && latency == nil {
		return nil
	}
	if c := auth.CallerOf(ctx); s.authEnabled() && !c.Member {
		return &auth.Error{Kind: auth.PermissionDenied, Msg: fmt.Sprintf("item %d: delivery_status and delivery_latency are coordd's own delivery's: cluster members only", i)}
	}
	if status != 0 && (status < 100 || status > 599) {
		return invalidItem(i, "delivery_status", "must be an HTTP status (100 to 599) or 0, not %d", status)
	}
	if latency != nil {
		if err := latency.CheckValid(); err != nil || latency.AsDuration() < 0 || latency.AsDuration() > maxDeliveryLatency {
			return invalidItem(i, "delivery_latency", "must be a duration in [0s, %s]", maxDeliveryLatency)
		}
	}
	return nil
}

// retryAfterMs is a failure's retry_after in ms (0 when unset or not a
// positive duration), at most the backoff limit.
func retryAfterMs(d *durationpb.Duration) int64 {
	if d == nil || d.CheckValid() != nil || d.AsDuration() <= 0 {
		return 0
	}
	return min(d.AsDuration().Milliseconds(), fsm.MaxBackoffMs)
}

// SetTarget sets or clears a queue's target, checked as a job's.
func (q *queue) SetTarget(ctx context.Context, req *coordv1.QueueSetTargetRequest) (*coordv1.QueueSetTargetResponse, error) {
	s := q.s
	t, field, problem := wireTarget(req.GetTarget())
	if field == "" && t != nil {
		fsm.FillTargetDefaults(t)
		if field, problem = fsm.CheckTarget(t); field == "" {
			field, problem = s.checkDelivery(t)
		}
	}
	err := checkName("queue", req.GetQueue(), true)
	if err == nil && len(req.GetQueue()) > fsm.MaxQueueNameBytes {
		err = invalidArg("queue", "a queue name is at most %d bytes", fsm.MaxQueueNameBytes)
	}
	if field != "" {
		err = firstErr(err, invalidArg(field, "%s %s", field, problem))
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return queueOnLeader(s, ctx, coordv1.QueueClient.SetTarget, req, func() (*coordv1.QueueSetTargetResponse, error) {
		r, err := s.node.SetQueueTarget(ctx, &fsmv1.SetQueueTarget{Queue: req.GetQueue(), Target: t, Identity: auth.IdentityOf(ctx), SpecRules: fsm.JobSpecRules})
		if err != nil {
			return nil, err
		}
		out := &coordv1.QueueSetTargetResponse{}
		if r != nil {
			out.Target = queueTargetToProto(r)
		}
		return out, nil
	})
}

// Targets lists the queues' targets.
func (q *queue) Targets(ctx context.Context, req *coordv1.QueueTargetsRequest) (*coordv1.QueueTargetsResponse, error) {
	if err := checkName("queue", req.GetQueue(), false); err != nil {
		return nil, toStatus(err)
	}
	return stateRead(q.s, ctx, coordv1.NewQueueClient, coordv1.QueueClient.Targets, req, func(st *fsm.FSM, _ int64) (*coordv1.QueueTargetsResponse, error) {
		out := &coordv1.QueueTargetsResponse{}
		for _, t := range st.QueueTargets(req.GetQueue()) {
			out.Targets = append(out.Targets, queueTargetToProto(&t))
		}
		return out, nil
	})
}

func queueTargetToProto(t *fsm.QueueTarget) *coordv1.QueueTarget {
	return &coordv1.QueueTarget{Queue: t.Queue, Target: targetToProto(t.Target), UpdatedBy: t.UpdatedBy, UpdatedAt: timestamppb.New(time.UnixMilli(t.UpdatedAt))}
}
