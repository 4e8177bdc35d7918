package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/internal/backoff"
	"github.com/coordd/coordd/internal/pbtime"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/webhook"
)

// The headers of a delivery.
const (
	HeaderJobID        = "Coordd-Job-Id"
	HeaderAttempt      = "Coordd-Attempt"
	HeaderToken        = "Coordd-Fencing-Token"
	HeaderIdempotency  = "Idempotency-Key"
	HeaderWindow       = "Coordd-Window"
	HeaderOccurrence   = "Coordd-Occurrence"
	HeaderDeadline     = "Coordd-Deadline"
	HeaderTraceparent  = "Traceparent" // W3C Trace Context (docs/tracing.md)
	HeaderTracestate   = "Tracestate"
	excerptBytes       = 512 // of a failed response's body, in the attempt's error
	labelWindow        = "coordd.window"
	labelOccurrenceMs  = "coordd.occurrence_ms"
	userAgent          = "coordd-delivery/1"
	maxRetryAfter      = 30 * 24 * time.Hour
	reportAttemptsUpTo = time.Minute // how long a report is retried without a leader, at least
)

// outcome is what a request came to.
type outcome struct {
	status    int           // 0: no response
	latency   time.Duration // send to the end of the body
	body      []byte        // read, up to the bound
	cut       bool          // the body was longer
	err       error         // transport error, timeout
	retryable bool
	after     time.Duration // Retry-After
	lost      bool          // the attempt ended meanwhile (lapsed, cancelled): nothing to report
	refused   bool          // the allow-list refuses the URL now: not sent
}

// deliver sends one attempt and reports it.
func (d *Deliverer) deliver(ctx context.Context, cj *coordv1.ClaimedJob) {
	job, a := cj.GetJob(), cj.GetAttempt()
	t := job.GetTarget()
	timeout := pbtime.Duration(job.GetVisibilityTimeout())
	if t.GetTimeout() != nil && t.GetTimeout().AsDuration() > 0 {
		timeout = t.GetTimeout().AsDuration()
	}
	// The attempt lives while its heartbeats are accepted; a refused one
	// (lapsed, cancelled, handed on) ends the request at once.
	actx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		d.heartbeat(actx, job, a, stop)
	}()
	span := d.startSpan(ctx, job, a) // nil when tracing is off
	o := d.send(actx, job, a, t, timeout)
	endSpan(span, o)
	stop(nil)
	<-hbDone
	if cause := context.Cause(actx); cause != nil && !errors.Is(cause, context.Canceled) {
		o.lost = true // the heartbeat was refused: the attempt is over
	}
	d.m.observe(target(t.GetUrl()), o)
	if o.lost || ctx.Err() != nil {
		if o.lost {
			d.log.Info("delivery attempt ended while its request ran; not reported", "job_id", job.GetId(), "attempt", a.GetNumber(), "cause", context.Cause(actx))
		}
		return
	}
	d.report(ctx, job, a, o)
}

// errAttemptOver is the cause that ends a request whose attempt's
// heartbeat was refused.
type errAttemptOver struct{ reason string }

func (e errAttemptOver) Error() string { return "the attempt is over: " + e.reason }

// heartbeat extends the attempt every third of its visibility timeout
// while the request runs; a refusal cancels it (stop) with the reason.
func (d *Deliverer) heartbeat(ctx context.Context, job *coordv1.QueueJob, a *coordv1.JobAttempt, stop context.CancelCauseFunc) {
	every := max(pbtime.Duration(job.GetVisibilityTimeout())/3, 10*time.Millisecond)
	tk := d.clock.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C():
		}
		r, err := d.q.Heartbeat(ctx, &coordv1.QueueHeartbeatRequest{WorkerId: d.worker,
			Attempts: []*coordv1.JobAttemptRef{{JobId: job.GetId(), Attempt: a.GetNumber()}}})
		if err != nil {
			continue // no leader now: the next beat tries again
		}
		if res := r.GetResults(); len(res) == 1 && res[0].GetError() != nil {
			stop(errAttemptOver{res[0].GetError().GetReason()})
			return
		}
	}
}

// send makes the request and reads its answer, bounded by timeout.
func (d *Deliverer) send(ctx context.Context, job *coordv1.QueueJob, a *coordv1.JobAttempt, t *coordv1.HttpTarget, timeout time.Duration) outcome {
	u, err := d.opts.Allow.ParseTargetURL(t.GetUrl())
	if err != nil {
		return outcome{err: fmt.Errorf("target.url %s", err), refused: true} // not retryable: the operator's list refuses it now
	}
	release, ok := d.targetSlot(ctx, target(t.GetUrl()))
	if !ok {
		return outcome{err: ctx.Err(), retryable: true}
	}
	defer release()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body := job.GetArgs()
	if len(body) == 0 {
		body = []byte("null")
	}
	req, err := http.NewRequestWithContext(rctx, t.GetMethod(), u.String(), bytes.NewReader(body))
	if err != nil {
		return outcome{err: err}
	}
	now := clock.Wall(d.clock)
	d.setHeaders(req.Header, job, a, t, body, now, now.Add(timeout))
	start := d.clock.Now()
	resp, err := d.client.Do(req)
	if err != nil {
		return outcome{err: err, retryable: true, latency: clock.Since(d.clock, start)}
	}
	defer resp.Body.Close()
	o := outcome{status: resp.StatusCode}
	o.body, err = io.ReadAll(io.LimitReader(resp.Body, int64(d.opts.MaxResponseBytes)+1))
	o.latency = clock.Since(d.clock, start)
	if len(o.body) > d.opts.MaxResponseBytes {
		o.body, o.cut = o.body[:d.opts.MaxResponseBytes], true
	}
	if err != nil && !o.cut {
		return outcome{status: resp.StatusCode, err: fmt.Errorf("reading the response: %w", err), retryable: true, latency: o.latency}
	}
	switch {
	case o.status >= 200 && o.status <= 299:
	case retryableStatus(t, o.status):
		o.retryable = true
		o.after = retryAfter(resp.Header.Get("Retry-After"), now)
	}
	return o
}

// setHeaders sets a delivery's headers: the target's own, then coordd's
// and the signature (which the target cannot override).
func (d *Deliverer) setHeaders(h http.Header, job *coordv1.QueueJob, a *coordv1.JobAttempt, t *coordv1.HttpTarget, body []byte, now, deadline time.Time) {
	for k, v := range t.GetHeaders() {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", userAgent)
	id := strconv.FormatUint(job.GetId(), 10)
	h.Set(HeaderJobID, id)
	h.Set(HeaderAttempt, strconv.FormatUint(uint64(a.GetNumber()), 10))
	h.Set(HeaderToken, a.GetToken())
	key := job.GetUniqueKey()
	if key == "" {
		key = "coordd-job-" + id
	}
	h.Set(HeaderIdempotency, key)
	if w, ok := job.GetLabels()[labelWindow]; ok {
		h.Set(HeaderWindow, w)
	}
	if ms, err := strconv.ParseInt(job.GetLabels()[labelOccurrenceMs], 10, 64); err == nil {
		h.Set(HeaderOccurrence, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano))
	}
	h.Set(HeaderDeadline, deadline.UTC().Format(time.RFC3339Nano))
	if tp := job.GetTraceparent(); tp != "" {
		h.Set(HeaderTraceparent, tp)
		if ts := job.GetTracestate(); ts != "" {
			h.Set(HeaderTracestate, ts)
		}
	}
	if name := t.GetSecret(); name != "" {
		// A secret missing here (this node's file lacks it) still sends
		// the headers: the endpoint refuses the unsigned request, the
		// attempt fails and another node may deliver it.
		webhook.SetHeaders(h, "job_"+id, now, body, d.opts.Secrets[name]...)
	}
}

// checkRedirect follows redirects only within the target's host (and
// the allow-list), at most 5.
func (d *Deliverer) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("stopped after 5 redirects")
	}
	if req.URL.Host != via[0].URL.Host {
		return fmt.Errorf("redirect to another host (%s) not followed", req.URL.Host)
	}
	return d.opts.Allow.Host(req.URL.Hostname())
}

// report records the outcome with Complete or Fail, retrying while no
// leader answers (for at least reportAttemptsUpTo); a refusal (the attempt
// lapsed or was cancelled meanwhile) is logged: the job is another
// attempt's now, and a late 2xx is never taken for its success.
func (d *Deliverer) report(ctx context.Context, job *coordv1.QueueJob, a *coordv1.JobAttempt, o outcome) {
	retry := backoff.New(retryCalls)
	until := d.clock.Now().Add(max(reportAttemptsUpTo, pbtime.Duration(job.GetVisibilityTimeout())))
	for {
		refused, err := d.reportOnce(ctx, job, a, o)
		switch {
		case err == nil && refused == nil:
			return
		case err == nil:
			d.m.refused(target(job.GetTarget().GetUrl()))
			d.log.Info("delivery report refused: the attempt is over", "job_id", job.GetId(), "attempt", a.GetNumber(),
				"status", o.status, "reason", refused.GetReason())
			return
		case !transient(err) || ctx.Err() != nil || d.clock.Now().After(until):
			d.log.Warn("delivery report failed; the attempt will lapse", "job_id", job.GetId(), "attempt", a.GetNumber(), "err", err)
			return
		}
		if !retry.Wait(ctx, d.clock) {
			return
		}
	}
}

func (d *Deliverer) reportOnce(ctx context.Context, job *coordv1.QueueJob, a *coordv1.JobAttempt, o outcome) (*coordv1.JobItemError, error) {
	// Every request sent records its status (none without a response)
	// and latency with the attempt.
	var latency *durationpb.Duration
	if !o.refused {
		latency = durationpb.New(o.latency)
	}
	status := uint32(o.status)
	var tp string // the request's span, the parent of the leader's
	if d.tracer != nil {
		tp = job.GetTraceparent()
	}
	if o.err == nil && o.status >= 200 && o.status <= 299 {
		return d.submitReport(ctx, report{c: &coordv1.JobCompletion{JobId: job.GetId(), Attempt: a.GetNumber(), Result: resultOf(o),
			DeliveryStatus: status, DeliveryLatency: latency, Traceparent: tp}})
	}
	f := &coordv1.JobFailure{JobId: job.GetId(), Attempt: a.GetNumber(), Error: failureText(o), Retryable: o.retryable,
		DeliveryStatus: status, DeliveryLatency: latency, Traceparent: tp}
	if o.after > 0 {
		f.RetryAfter = durationpb.New(o.after)
	}
	return d.submitReport(ctx, report{f: f})
}

// resultOf is a 2xx's result: its body when it is JSON and whole, else a
// JSON object with the status, an excerpt and whether it was cut.
func resultOf(o outcome) []byte {
	if !o.cut && len(bytes.TrimSpace(o.body)) > 0 && json.Valid(o.body) {
		return o.body
	}
	if len(bytes.TrimSpace(o.body)) == 0 {
		return nil
	}
	out, _ := json.Marshal(struct {
		Status  int    `json:"status"`
		Excerpt string `json:"excerpt"`
		Cut     bool   `json:"cut,omitempty"`
	}{o.status, excerpt(o.body, 4096), o.cut || len(o.body) > 4096})
	return out
}

// failureText is the attempt's error: status (or transport error),
// latency and an excerpt of the body.
func failureText(o outcome) string {
	var b strings.Builder
	if o.status == 0 {
		fmt.Fprintf(&b, "delivery: %v", o.err)
	} else {
		fmt.Fprintf(&b, "HTTP %d", o.status)
		if o.err != nil {
			fmt.Fprintf(&b, " (%v)", o.err)
		}
	}
	fmt.Fprintf(&b, " after %s", o.latency.Round(time.Millisecond))
	if o.after > 0 {
		fmt.Fprintf(&b, "; Retry-After %s", o.after)
	}
	if len(o.body) > 0 {
		fmt.Fprintf(&b, ": %s", excerpt(o.body, excerptBytes))
	}
	return b.String()
}

// excerpt is up to n bytes of body as valid UTF-8, marked when cut.
func excerpt(body []byte, n int) string {
	cut := len(body) > n
	if cut {
		body = body[:n]
	}
	s := strings.ToValidUTF8(string(body), "\uFFFD")
	for cut && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	if cut {
		s += " …[cut]"
	}
	return s
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date
// (relative to now); 0 when absent or unreadable; at most 30 days.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && s > 0 {
		return min(time.Duration(s)*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxRetryAfter)
	}
	return 0
}

// target is a target's key for the per-target bound and the metrics:
// scheme://host[:port].
func target(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "invalid"
	}
	return u.Scheme + "://" + strings.ToLower(u.Host)
}

// retryableStatus: 429, 5xx and the target's own codes.
func retryableStatus(t *coordv1.HttpTarget, code int) bool {
	if code == 429 || code >= 500 && code <= 599 {
		return true
	}
	for _, c := range t.GetRetryableStatus() {
		if int(c) == code {
			return true
		}
	}
	return false
}
