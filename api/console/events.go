package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/internal/apijson"

	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// events is the live-update stream of the leases and resources pages: a
// Server-Sent Events stream fed by a Watch on this node (any node serves
// one from its applied state; nothing is written to the log). Events:
//
//	ready   the watch started (data: {"index": N})
//	change  one WatchEvent in the HTTP API's JSON (internal/apijson)
//	end     the watch failed; data: {"code", "reason", "message"}. The
//	        page reloads itself after a moment.
//
// A browser that cannot keep up is dropped by the node (WATCHER_TOO_SLOW)
// and gets an end event, never slowing the node.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fam := map[string]coordv1.WatchFamily{"lease": coordv1.WatchFamily_WATCH_FAMILY_LEASE,
		"resource": coordv1.WatchFamily_WATCH_FAMILY_RESOURCE}[q.Get("family")]
	if fam == coordv1.WatchFamily_WATCH_FAMILY_UNSPECIFIED {
		http.Error(w, `family must be "lease" or "resource"`, http.StatusBadRequest)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok || c.b.Watch == nil {
		http.Error(w, "streaming is not supported here", http.StatusNotImplemented)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	started := false
	rc := http.NewResponseController(w)
	// bounded runs one write within StreamWriteTimeout and leaves the
	// stream without a deadline while it is quiet (a network deadline:
	// wall time, not the console's clock).
	bounded := func(f func() error) error {
		d := c.cfg.StreamWriteTimeout
		if d > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(d))
		}
		err := f()
		flusher.Flush()
		if d > 0 && err == nil {
			_ = rc.SetWriteDeadline(time.Time{})
		}
		return err
	}
	write := func(event string, data []byte) error {
		return bounded(func() error {
			_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
			return err
		})
	}
	req := &coordv1.WatchRequest{Prefix: q.Get("prefix"), Families: []coordv1.WatchFamily{fam}}
	// The watch's sends may run on another goroutine, and one may still be
	// running when Watch has returned: mu keeps them and the closing
	// write apart, and ended stops any send after that.
	var (
		mu    sync.Mutex
		ended bool
	)
	err := c.b.Watch(ctx, req, func(resp *coordv1.WatchResponse) error {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return context.Canceled
		}
		if !started {
			started = true
			w.WriteHeader(http.StatusOK)
			return write("ready", fmt.Appendf(nil, `{"index":%d}`, resp.GetResumeIndex()))
		}
		if len(resp.GetEvents()) == 0 {
			return bounded(func() error {
				_, err := fmt.Fprintf(w, ": progress %d\n\n", resp.GetResumeIndex()) // a comment keeps proxies from timing out
				return err
			})
		}
		for _, e := range resp.GetEvents() {
			b, err := apijson.Marshal(e)
			if err != nil {
				return err
			}
			if err := write("change", b); err != nil {
				return err
			}
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	ended = true
	if ctx.Err() != nil {
		return // the browser left, or the console is closing
	}
	st, _ := status.FromError(err)
	end, _ := json.Marshal(map[string]string{"code": st.Code().String(), "reason": coorderr.WireReason(err), "message": st.Message()})
	if !started {
		// Refused before it started (bad prefix, denied): a plain error
		// with the API's status; EventSource gives up on a non-200.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(c.cfg.HTTPStatus(st.Code()))
		_, _ = w.Write(end)
		return
	}
	_ = write("end", end)
}
