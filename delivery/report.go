package delivery

import (
	"context"
	"fmt"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Reports are grouped like the proposer's commits: the reporter takes
// the first waiting outcome, then every other one already waiting (up to
// maxReportBatch items and maxReportBytes of results), and sends them as
// one Complete and one Fail; nothing waits for a batch to fill.
const (
	maxReportBatch = 1000    // fsm.MaxJobBatch
	maxReportBytes = 2 << 20 // results in one call, well under the 4 MiB message limit
)

// report is one attempt's outcome on its way to the queue.
type report struct {
	c    *coordv1.JobCompletion // one of c and f
	f    *coordv1.JobFailure
	done chan reportResult // capacity 1
}

type reportResult struct {
	refused *coordv1.JobItemError
	err     error
}

// submitReport hands r to the reporter and waits for its item's answer.
func (d *Deliverer) submitReport(ctx context.Context, r report) (*coordv1.JobItemError, error) {
	r.done = make(chan reportResult, 1)
	select {
	case d.reports <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case res := <-r.done:
		return res.refused, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// reporter sends the waiting reports in groups until ctx ends.
func (d *Deliverer) reporter(ctx context.Context) {
	for {
		var batch []report
		select {
		case <-ctx.Done():
			return
		case r := <-d.reports:
			batch = append(batch, r)
		}
		bytes := len(batch[0].c.GetResult())
	more:
		for len(batch) < maxReportBatch && bytes < maxReportBytes {
			select {
			case r := <-d.reports:
				batch = append(batch, r)
				bytes += len(r.c.GetResult())
			default:
				break more
			}
		}
		var cs, fs []report
		for _, r := range batch {
			if r.c != nil {
				cs = append(cs, r)
			} else {
				fs = append(fs, r)
			}
		}
		if len(cs) > 0 {
			req := &coordv1.QueueCompleteRequest{WorkerId: d.worker}
			for _, r := range cs {
				req.Completions = append(req.Completions, r.c)
			}
			resp, err := d.q.Complete(ctx, req)
			answer(cs, resp.GetResults(), err)
		}
		if len(fs) > 0 {
			req := &coordv1.QueueFailRequest{WorkerId: d.worker}
			for _, r := range fs {
				req.Failures = append(req.Failures, r.f)
			}
			resp, err := d.q.Fail(ctx, req)
			answer(fs, resp.GetResults(), err)
		}
	}
}

// answer gives each report its item's result (or the call's error).
func answer[R interface{ GetError() *coordv1.JobItemError }](rs []report, results []R, err error) {
	if err == nil && len(results) != len(rs) {
		err = fmt.Errorf("%d outcomes answered with %d results", len(rs), len(results))
	}
	for i, r := range rs {
		if err != nil {
			r.done <- reportResult{err: err}
			continue
		}
		r.done <- reportResult{refused: results[i].GetError()}
	}
}
