package api

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/pbtime"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Pausing a queue (fsm/queue_pause.go): a replicated record of who paused
// it and when; fetches hand nothing out of a paused queue while submits
// and running attempts go on.

// checkPauseQueue checks a Pause or Resume's queue name.
func checkPauseQueue(queue string) error {
	err := checkName("queue", queue, true)
	if err == nil && len(queue) > fsm.MaxQueueNameBytes {
		err = invalidArg("queue", "a queue name is at most %d bytes", fsm.MaxQueueNameBytes)
	}
	return err
}

func (q *queue) Pause(ctx context.Context, req *coordv1.QueuePauseRequest) (*coordv1.QueuePauseResponse, error) {
	if err := checkPauseQueue(req.GetQueue()); err != nil {
		return nil, toStatus(err)
	}
	return queueOnLeader(q.s, ctx, coordv1.QueueClient.Pause, req, func() (*coordv1.QueuePauseResponse, error) {
		r, err := q.s.node.PauseQueue(ctx, &fsmv1.PauseQueue{Queue: req.GetQueue(), Paused: true, Identity: auth.IdentityOf(ctx)})
		if err != nil {
			return nil, err
		}
		return &coordv1.QueuePauseResponse{Pause: queuePauseToProto(r.Pause), Already: r.Already}, nil
	})
}

func (q *queue) Resume(ctx context.Context, req *coordv1.QueueResumeRequest) (*coordv1.QueueResumeResponse, error) {
	if err := checkPauseQueue(req.GetQueue()); err != nil {
		return nil, toStatus(err)
	}
	return queueOnLeader(q.s, ctx, coordv1.QueueClient.Resume, req, func() (*coordv1.QueueResumeResponse, error) {
		r, err := q.s.node.PauseQueue(ctx, &fsmv1.PauseQueue{Queue: req.GetQueue(), Paused: false, Identity: auth.IdentityOf(ctx)})
		if err != nil {
			return nil, err
		}
		return &coordv1.QueueResumeResponse{WasPaused: !r.Already}, nil
	})
}

func queuePauseToProto(p *fsm.QueuePause) *coordv1.QueuePause {
	if p == nil {
		return nil
	}
	return &coordv1.QueuePause{Queue: p.Queue, PausedBy: p.PausedBy, PausedAt: pbtime.At(p.PausedAt)}
}

// pauseToStats fills a queue's stats with its pause.
func pauseToStats(out *coordv1.QueueStats, p *fsm.QueuePause) *coordv1.QueueStats {
	if p != nil {
		out.Paused, out.PausedBy, out.PausedAt = true, p.PausedBy, pbtime.At(p.PausedAt)
	}
	return out
}

var descQueuePaused = prometheus.NewDesc("coordd_queue_paused",
	"1 while a queue is paused (no fetch hands out its jobs), else 0, by queue, in this node's replica; "+
		"queue=\"_other\" counts the paused queues beyond the first series.", []string{"queue"}, nil)

// pausedCollector reports coordd_queue_paused for the queues the other
// queue series cover (the first MaxQueueSeries by name, with jobs or
// paused).
type pausedCollector struct{ s *Server }

func (c *pausedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descQueuePaused }

func (c *pausedCollector) Collect(ch chan<- prometheus.Metric) {
	st, _, err := c.s.node.Read(context.Background(), true)
	if err != nil || st == nil {
		return
	}
	other := 0
	stats := st.QueueStats("", c.s.node.CalendarTime())
	for i, x := range stats {
		paused := 0
		if x.Pause != nil {
			paused = 1
		}
		if i >= MaxQueueSeries {
			other += paused
			continue
		}
		ch <- prometheus.MustNewConstMetric(descQueuePaused, prometheus.GaugeValue, float64(paused), x.Queue)
	}
	if len(stats) > MaxQueueSeries {
		ch <- prometheus.MustNewConstMetric(descQueuePaused, prometheus.GaugeValue, float64(other), otherQueues)
	}
}
