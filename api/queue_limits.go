package api

import (
	"context"
	"math"
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/pbtime"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Queue limits at the edge (docs/jobs.md "Limits"): the wire form (a rate
// per second, kinds as a map) becomes the FSM's (a rate per 1000 s, kinds
// sorted), checked by fsm.CheckQueueLimits.

// wireLimits converts limits (nil: clear) or returns the error naming the
// field.
func wireLimits(l *coordv1.QueueLimits) (*fsmv1.QueueLimitsSpec, error) {
	if l == nil {
		return nil, nil
	}
	r := l.GetRate()
	if math.IsNaN(r) || r < 0 || r > fsm.MaxRateMilli/1000 || (r > 0 && r < 0.001) {
		return nil, invalidArg("rate", "must be 0 (none) or in [0.001, %d] per second, not %v", fsm.MaxRateMilli/1000, r)
	}
	sp := &fsmv1.QueueLimitsSpec{Concurrency: l.GetConcurrency(), RateMilli: uint32(math.Round(r * 1000)), Burst: l.GetBurst()}
	if sp.RateMilli > 0 && sp.Burst == 0 {
		sp.Burst = uint32(max(1, math.Ceil(r)))
	}
	if d := l.GetMaxRun(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			return nil, invalidArg("max_run", "must be a duration in [0s, %s]", fsm.Dur(fsm.MaxRunMs))
		}
		sp.MaxRunMs = pbtime.DurMs(d)
	}
	for k, n := range l.GetKindConcurrency() {
		sp.Kinds = append(sp.Kinds, &fsmv1.KindLimit{Kind: k, Concurrency: n})
	}
	sort.Slice(sp.Kinds, func(a, b int) bool { return sp.Kinds[a].Kind < sp.Kinds[b].Kind })
	if field, problem := fsm.CheckQueueLimits(sp); field != "" {
		return nil, invalidArg(field, "%s %s", field, problem)
	}
	return sp, nil
}

// SetLimits sets or clears a queue's limits (the admin op).
func (q *queue) SetLimits(ctx context.Context, req *coordv1.QueueSetLimitsRequest) (*coordv1.QueueSetLimitsResponse, error) {
	s := q.s
	err := checkName("queue", req.GetQueue(), true)
	if err == nil && len(req.GetQueue()) > fsm.MaxQueueNameBytes {
		err = invalidArg("queue", "a queue name is at most %d bytes", fsm.MaxQueueNameBytes)
	}
	sp, lerr := wireLimits(req.GetLimits())
	if err = firstErr(err, lerr); err != nil {
		return nil, toStatus(err)
	}
	return queueOnLeader(s, ctx, coordv1.QueueClient.SetLimits, req, func() (*coordv1.QueueSetLimitsResponse, error) {
		r, err := s.node.SetQueueLimits(ctx, &fsmv1.SetQueueLimits{Queue: req.GetQueue(), Limits: sp, Identity: auth.IdentityOf(ctx)})
		if err != nil {
			return nil, err
		}
		out := &coordv1.QueueSetLimitsResponse{}
		if r != nil {
			out.Limits = queueLimitsToProto(r)
		}
		return out, nil
	})
}

// Limits lists the queues' limits.
func (q *queue) Limits(ctx context.Context, req *coordv1.QueueLimitsRequest) (*coordv1.QueueLimitsResponse, error) {
	if err := checkName("queue", req.GetQueue(), false); err != nil {
		return nil, toStatus(err)
	}
	return stateRead(q.s, ctx, coordv1.NewQueueClient, coordv1.QueueClient.Limits, req, func(st *fsm.FSM, _ int64) (*coordv1.QueueLimitsResponse, error) {
		out := &coordv1.QueueLimitsResponse{}
		for _, l := range st.QueueLimitsOf(req.GetQueue()) {
			out.Limits = append(out.Limits, queueLimitsToProto(&l))
		}
		return out, nil
	})
}

func queueLimitsToProto(l *fsm.QueueLimits) *coordv1.QueueLimits {
	out := &coordv1.QueueLimits{Queue: l.Queue, Concurrency: l.Concurrency, Rate: float64(l.RateMilli) / 1000, Burst: l.Burst,
		UpdatedBy: l.UpdatedBy, UpdatedAt: pbtime.At(l.UpdatedAt)}
	if l.MaxRunMs > 0 {
		out.MaxRun = pbtime.Dur(l.MaxRunMs)
	}
	if len(l.Kinds) > 0 {
		out.KindConcurrency = make(map[string]uint32, len(l.Kinds))
		for _, k := range l.Kinds {
			out.KindConcurrency[k.Kind] = k.Concurrency
		}
	}
	return out
}

// statsLimits adds a queue's limits to its stats at calendar time cal.
func statsLimits(out *coordv1.QueueStats, lims []fsm.QueueLimits, cal int64) {
	for _, l := range lims {
		if l.Queue != out.GetQueue() {
			continue
		}
		out.ConcurrencyLimit = l.Concurrency
		if l.RateMilli > 0 {
			out.RateLimit = float64(l.RateMilli) / 1000
			out.RateTokens = float64(l.Tokens(cal)) / 1e6
		}
	}
}

var (
	descQueueConcurrencyLimit = prometheus.NewDesc("coordd_queue_concurrency_limit",
		"A queue's concurrency limit (attempts running at once; compare coordd_queue_jobs{state=\"running\"}), by queue; absent without one.", []string{"queue"}, nil)
	descQueueRateLimit = prometheus.NewDesc("coordd_queue_rate_limit",
		"A queue's rate limit, attempts started per second (compare rate(coordd_queue_attempts_total)), by queue; absent without one.", []string{"queue"}, nil)
)

// collectLimits reports the queues' limits (at most MaxQueueSeries).
func collectLimits(ch chan<- prometheus.Metric, st *fsm.FSM) {
	lims := st.QueueLimitsOf("")
	for _, l := range lims[:min(len(lims), MaxQueueSeries)] {
		if l.Concurrency > 0 {
			ch <- prometheus.MustNewConstMetric(descQueueConcurrencyLimit, prometheus.GaugeValue, float64(l.Concurrency), l.Queue)
		}
		if l.RateMilli > 0 {
			ch <- prometheus.MustNewConstMetric(descQueueRateLimit, prometheus.GaugeValue, float64(l.RateMilli)/1000, l.Queue)
		}
	}
}
