package console

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// The jobs page's search (label, created range, args substring: a bounded
// scan on the server, Queue.List) and bulk actions on the jobs a filter
// selects (Queue.Bulk, applied by the leader in batches).

// search is the jobs page's search fields beyond queue, state and kind.
type search struct {
	Label, Since, Until, Args string
	since, until              time.Time
	// Scanned: the jobs the server looked at for this page of a search.
	Scanned uint64
}

func parseSearch(q url.Values) (search, error) {
	s := search{Label: q.Get("label"), Since: q.Get("since"), Until: q.Get("until"), Args: q.Get("args")}
	if s.Label != "" && !strings.Contains(s.Label, "=") {
		return s, errors.New("label: want key=value, not " + strconv.Quote(s.Label))
	}
	for _, f := range []struct {
		name, v string
		dst     *time.Time
	}{{"since", s.Since, &s.since}, {"until", s.Until, &s.until}} {
		if f.v == "" {
			continue
		}
		t, err := parseWhen(f.v)
		if err != nil {
			return s, errors.New(f.name + ": want a time such as 2026-09-25T10:00:00Z or 2026-09-25T10:00, not " + strconv.Quote(f.v))
		}
		*f.dst = t
	}
	return s, nil
}

// parseWhen reads RFC 3339, or the form of an <input type=datetime-local>
// (UTC).
func parseWhen(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Parse("2006-01-02T15:04", v)
}

// Searching reports whether the page scans (a created range or args).
func (s search) Searching() bool { return s.Since != "" || s.Until != "" || s.Args != "" }

func (s search) sinceTS() *timestamppb.Timestamp { return ts0(s.since) }
func (s search) untilTS() *timestamppb.Timestamp { return ts0(s.until) }

func ts0(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "ui-" + hex.EncodeToString(b[:])
}

var bulkActions = map[string]coordv1.BulkAction{
	"retry": coordv1.BulkAction_BULK_ACTION_RETRY, "cancel": coordv1.BulkAction_BULK_ACTION_CANCEL, "delete": coordv1.BulkAction_BULK_ACTION_DELETE,
}

// bulkAction starts a bulk action on the jobs the form's filter selects
// (queue, state, kind, label, created range; not args: a bulk action acts
// on what the indexes select), with the form's request id, so a repeated
// post is the same operation; then shows the jobs page with its progress.
func (c *Console) bulkAction(w http.ResponseWriter, r *http.Request) {
	action, ok := bulkActions[r.PathValue("action")]
	if !ok {
		c.fail(w, r, http.StatusNotFound, "Unknown bulk action "+strconv.Quote(r.PathValue("action"))+" (retry, cancel or delete)")
		return
	}
	f := r.PostForm
	back := url.Values{}
	for _, k := range []string{"queue", "state", "kind", "label", "since", "until"} {
		if v := f.Get(k); v != "" {
			back.Set(k, v)
		}
	}
	r.URL.RawQuery = back.Encode() // a refusal shows the same filter
	state, ok := parseState(strings.ToUpper(f.Get("state")))
	s, err := parseSearch(back)
	if !ok || err != nil {
		c.fail(w, r, http.StatusBadRequest, "Bad filter: "+errors.Join(err).Error())
		return
	}
	filter := &coordv1.JobFilter{Queue: f.Get("queue"), State: state, Kind: f.Get("kind"), Label: s.Label,
		CreatedAfter: s.sinceTS(), CreatedBefore: s.untilTS()}
	resp, err := c.b.Queue.Bulk(r.Context(), &coordv1.QueueBulkRequest{Action: action, Filter: filter, RequestId: f.Get("request_id")})
	if err != nil {
		perr, code := c.explain(r.Context(), err)
		perr.Message = r.PathValue("action") + " refused: " + perr.Message
		c.showJobs(w, r, c.cfg.HTTPStatus(code), perr)
		return
	}
	back.Set("done", "bulk-"+r.PathValue("action"))
	back.Set("op", resp.GetOp().GetId())
	http.Redirect(w, r, "/ui/jobs?"+back.Encode(), http.StatusSeeOther)
}
