package console

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Page sizes: small pages render fast whatever the number of records.
const (
	leasePage    = 100
	jobPage      = 50
	schedulePage = 50
)

type clusterData struct {
	Status  *coordv1.StatusResponse
	Members []memberRow
}

type memberRow struct {
	*coordv1.Member
	Offset *coordv1.ClockOffset
	Self   bool
}

func (c *Console) clusterPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	st, err := c.b.Cluster.Status(ctx, &coordv1.StatusRequest{})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	ms, err := c.b.Cluster.Members(ctx, &coordv1.MembersRequest{})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	offsets := map[string]*coordv1.ClockOffset{}
	for _, o := range st.GetClockOffsets() {
		offsets[o.GetId()] = o
	}
	if o := st.GetClockOffset(); o != nil {
		offsets[st.GetId()] = o
	}
	d := clusterData{Status: st}
	for _, m := range ms.GetMembers() {
		d.Members = append(d.Members, memberRow{Member: m, Offset: offsets[m.GetId()], Self: m.GetId() == st.GetId()})
	}
	c.render(w, r, http.StatusOK, "cluster", "Cluster", d, nil)
}

// pager links the pages of a list: its first page (and whether this is
// it) and the next one ("" on the last).
type pager struct {
	Next     string
	IsFirst  bool
	FirstURL string
}

// newPager is the pager of the list at path with the query filter, showing
// the page tok (the first: ""), whose next page is next.
func newPager(path string, filter url.Values, tok, next string) pager {
	p := pager{IsFirst: tok == "", FirstURL: path + "?" + filter.Encode()}
	if next != "" {
		filter.Set("page_token", next)
		p.Next = path + "?" + filter.Encode()
	}
	return p
}

// prefixPage is a page of a list by name prefix.
type prefixPage struct {
	Prefix string
	pager
}

// listByPrefix calls list with the query's prefix and page token, and
// links the list at path; false after answering list's error.
func listByPrefix[Resp interface{ GetNextPageToken() string }](c *Console, w http.ResponseWriter, r *http.Request, path string,
	list func(ctx context.Context, prefix, tok string) (Resp, error)) (Resp, prefixPage, bool) {
	q := r.URL.Query()
	prefix, tok := q.Get("prefix"), q.Get("page_token")
	resp, err := list(r.Context(), prefix, tok)
	if err != nil {
		c.failErr(w, r, err)
		return resp, prefixPage{}, false
	}
	return resp, prefixPage{Prefix: prefix, pager: newPager(path, url.Values{"prefix": {prefix}}, tok, resp.GetNextPageToken())}, true
}

type leasesData struct {
	prefixPage
	Leases []*coordv1.Lease
	NowMs  int64
}

func (c *Console) leasesPage(w http.ResponseWriter, r *http.Request) {
	resp, page, ok := listByPrefix(c, w, r, "/ui/leases", func(ctx context.Context, prefix, tok string) (*coordv1.ListLeasesResponse, error) {
		return c.b.Coordinator.ListLeases(ctx, &coordv1.ListLeasesRequest{Prefix: prefix, PageToken: tok, PageSize: leasePage})
	})
	if ok {
		c.render(w, r, http.StatusOK, "leases", "Leases", leasesData{prefixPage: page, Leases: resp.GetLeases()}, nil)
	}
}

type queuesData struct {
	Stats    *coordv1.QueueStatsResponse
	Chart    any
	Hour     map[string]Counters
	Interval string
	Window   string // the chart's span
	Samples  int
	// Targets: the queues' HTTP targets (Queue.Targets); TargetsErr why
	// they could not be read (the page shows the rest).
	Targets    []*coordv1.QueueTarget
	TargetsErr string
	// Limits are the queues' limits (Queue.Limits), StatsOf each queue's
	// stats by name (running against the limit, the rate's tokens now).
	Limits    []*coordv1.QueueLimits
	LimitsErr string
	StatsOf   map[string]*coordv1.QueueStats
	// CanAct: the queues the caller may pause and resume (op job).
	CanAct map[string]bool
}

func (c *Console) queuesPage(w http.ResponseWriter, r *http.Request) {
	c.showQueues(w, r, http.StatusOK, nil)
}

// showQueues renders the queues page, with a refused action's error.
func (c *Console) showQueues(w http.ResponseWriter, r *http.Request, httpStatus int, perr *pageError) {
	resp, err := c.b.Queue.Stats(r.Context(), &coordv1.QueueStatsRequest{})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	pts, sums := c.ring.series()
	d := queuesData{Stats: resp, Chart: chartSVG(pts, ChartPoints-1, c.cfg.SampleInterval), Hour: sums,
		Interval: durMs(c.cfg.SampleInterval.Milliseconds()), Window: durMs(int64(ChartPoints-1) * c.cfg.SampleInterval.Milliseconds()),
		Samples: len(pts)}
	if ts, err := c.b.Queue.Targets(r.Context(), &coordv1.QueueTargetsRequest{}); err != nil {
		d.TargetsErr = status.Convert(err).Message()
	} else {
		d.Targets = ts.GetTargets()
	}
	if ls, err := c.b.Queue.Limits(r.Context(), &coordv1.QueueLimitsRequest{}); err != nil {
		d.LimitsErr = status.Convert(err).Message()
	} else {
		d.Limits = ls.GetLimits()
	}
	d.CanAct, d.StatsOf = map[string]bool{}, map[string]*coordv1.QueueStats{}
	for _, st := range resp.GetQueues() {
		d.CanAct[st.GetQueue()] = c.allowed(r.Context(), "job", st.GetQueue())
		d.StatsOf[st.GetQueue()] = st
	}
	c.render(w, r, httpStatus, "queues", "Queues", d, perr)
}

type jobsData struct {
	Queue, Kind, State string
	States             []string
	Jobs               []*coordv1.QueueJob
	pager
	search
	// Bulk: the recent bulk operations (Queue.ListBulk); RequestID names
	// the bulk form's operation (a repeated post is the same operation);
	// CanAct: the caller may act on the queue filtered by.
	Bulk      []*coordv1.BulkOp
	RequestID string
	CanAct    bool
}

// jobStates are the states a list can filter by, in lifecycle order.
var jobStates = []string{"SCHEDULED", "AVAILABLE", "RUNNING", "RETRYABLE", "SUCCEEDED", "CANCELLED", "DEAD"}

func parseState(s string) (coordv1.JobState, bool) {
	if s == "" {
		return coordv1.JobState_JOB_STATE_UNSPECIFIED, true
	}
	v, ok := coordv1.JobState_value["JOB_STATE_"+strings.ToUpper(s)]
	return coordv1.JobState(v), ok
}

func (c *Console) jobsPage(w http.ResponseWriter, r *http.Request) {
	c.showJobs(w, r, http.StatusOK, nil)
}

func (c *Console) showJobs(w http.ResponseWriter, r *http.Request, httpStatus int, perr *pageError) {
	q := r.URL.Query()
	d := jobsData{Queue: q.Get("queue"), Kind: q.Get("kind"), State: strings.ToUpper(q.Get("state")), States: jobStates}
	state, ok := parseState(d.State)
	if !ok {
		c.fail(w, r, http.StatusBadRequest, "Unknown job state "+strconv.Quote(d.State)+": one of "+strings.Join(jobStates, ", "))
		return
	}
	var err error
	if d.search, err = parseSearch(q); err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	tok := q.Get("page_token")
	req := &coordv1.QueueListRequest{Queue: d.Queue, Kind: d.Kind, State: state, Label: d.Label, PageSize: jobPage, PageToken: tok,
		ArgsContains: d.Args, CreatedAfter: d.sinceTS(), CreatedBefore: d.untilTS()}
	resp, err := c.b.Queue.List(r.Context(), req)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	d.Jobs, d.Scanned = resp.GetJobs(), resp.GetScanned()
	next := resp.GetNextPageToken()
	filter := url.Values{}
	for k, v := range map[string]string{"queue": d.Queue, "kind": d.Kind, "state": d.State, "label": d.Label, "since": d.Since,
		"until": d.Until, "args": d.Args} {
		if v != "" {
			filter.Set(k, v)
		}
	}
	d.pager = newPager("/ui/jobs", filter, tok, next)
	if ops, err := c.b.Queue.ListBulk(r.Context(), &coordv1.QueueListBulkRequest{}); err == nil {
		d.Bulk = ops.GetOps()
		if len(d.Bulk) > 5 {
			d.Bulk = d.Bulk[:5]
		}
	}
	d.RequestID = newRequestID()
	d.CanAct = c.allowed(r.Context(), "job", d.Queue)
	c.render(w, r, httpStatus, "jobs", "Jobs", d, perr)
}

type jobData struct {
	Job        *coordv1.QueueJob
	CalendarMs int64
	CanAct     bool
	CanCancel  bool
	CanRetry   bool
}

func (c *Console) jobPage(w http.ResponseWriter, r *http.Request) {
	c.showJob(w, r, http.StatusOK, nil)
}

// showJob renders a job's page, with a refused action's error.
func (c *Console) showJob(w http.ResponseWriter, r *http.Request, httpStatus int, perr *pageError) {
	id, ok := c.jobID(w, r)
	if !ok {
		return
	}
	resp, err := c.b.Queue.Get(r.Context(), &coordv1.QueueGetRequest{Id: id})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	j := resp.GetJob()
	d := jobData{Job: j, CalendarMs: resp.GetCalendarTimeMs(), CanAct: c.allowed(r.Context(), "job", j.GetQueue())}
	switch j.GetState() {
	case coordv1.JobState_JOB_STATE_SUCCEEDED:
	case coordv1.JobState_JOB_STATE_CANCELLED, coordv1.JobState_JOB_STATE_DEAD:
		d.CanRetry = true
	case coordv1.JobState_JOB_STATE_RUNNING, coordv1.JobState_JOB_STATE_AVAILABLE:
		d.CanCancel = true
	default: // scheduled, retryable
		d.CanCancel, d.CanRetry = true, true
	}
	c.render(w, r, httpStatus, "job", "Job "+strconv.FormatUint(id, 10), d, perr)
}

// jobID is the job id in the path; false after answering 400 when it is
// not one.
func (c *Console) jobID(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		c.fail(w, r, http.StatusBadRequest, "A job id is a positive integer, not "+strconv.Quote(r.PathValue("id")))
		return 0, false
	}
	return id, true
}

func (c *Console) jobAction(w http.ResponseWriter, r *http.Request) {
	id, ok := c.jobID(w, r)
	if !ok {
		return
	}
	c.act(w, r, "job", "cancel or retry", map[string]func(context.Context) error{
		"cancel": dropAnswer(c.b.Queue.Cancel, &coordv1.QueueCancelRequest{Id: id}),
		"retry":  dropAnswer(c.b.Queue.Retry, &coordv1.QueueRetryRequest{Id: id}),
	}, "/ui/jobs/"+strconv.FormatUint(id, 10), c.showJob)
}

// act runs the action the path names, one of actions on a what (choices
// lists them for the 404 of another), then redirects to the page at path
// (done=action), or shows it again with show, with the refusal.
func (c *Console) act(w http.ResponseWriter, r *http.Request, what, choices string, actions map[string]func(context.Context) error,
	path string, show func(w http.ResponseWriter, r *http.Request, httpStatus int, perr *pageError)) {
	action := r.PathValue("action")
	run, ok := actions[action]
	if !ok {
		c.fail(w, r, http.StatusNotFound, "Unknown "+what+" action "+strconv.Quote(action)+" ("+choices+")")
		return
	}
	if err := run(r.Context()); err != nil {
		perr, code := c.explain(r.Context(), err)
		perr.Message = action + " refused: " + perr.Message
		show(w, r, c.cfg.HTTPStatus(code), perr)
		return
	}
	http.Redirect(w, r, path+"?done="+action, http.StatusSeeOther)
}

// dropAnswer is an action that calls call with req (its answer is not
// shown: the page is).
func dropAnswer[Req, Resp any](call func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := call(ctx, req)
		return err
	}
}

type schedulesData struct {
	prefixPage
	Schedules  []scheduleRow
	Overdue    int64
	CalendarMs int64
}

type scheduleRow struct {
	*coordv1.Schedule
	Overdue int64
}

func (c *Console) schedulesPage(w http.ResponseWriter, r *http.Request) {
	resp, page, ok := listByPrefix(c, w, r, "/ui/schedules", func(ctx context.Context, prefix, tok string) (*coordv1.ListSchedulesResponse, error) {
		return c.b.Schedules.ListSchedules(ctx, &coordv1.ListSchedulesRequest{Prefix: prefix, PageToken: tok, PageSize: schedulePage})
	})
	if !ok {
		return
	}
	d := schedulesData{prefixPage: page, CalendarMs: resp.GetCalendarTimeMs()}
	// Overdue occurrences: the first page of ListOverdue (its total, its
	// top schedules and up to 100 occurrences) marks the schedules.
	overdue := map[string]int64{}
	if od, err := c.b.Schedules.ListOverdue(r.Context(), &coordv1.ListOverdueRequest{PageSize: 100}); err == nil {
		d.Overdue = od.GetTotal()
		for _, o := range od.GetOccurrences() {
			overdue[o.GetSchedule()]++
		}
		for _, t := range od.GetTopSchedules() {
			overdue[t.GetSchedule()] = max(overdue[t.GetSchedule()], t.GetOverdue())
		}
	}
	for _, s := range resp.GetSchedules() {
		d.Schedules = append(d.Schedules, scheduleRow{Schedule: s, Overdue: overdue[s.GetSpec().GetName()]})
	}
	c.render(w, r, http.StatusOK, "schedules", "Schedules", d, nil)
}

type scheduleData struct {
	*coordv1.GetScheduleResponse
	Queue  string
	CanAct bool
}

func (c *Console) schedulePage(w http.ResponseWriter, r *http.Request) {
	c.showSchedule(w, r, http.StatusOK, nil)
}

func (c *Console) showSchedule(w http.ResponseWriter, r *http.Request, httpStatus int, perr *pageError) {
	name := r.PathValue("name")
	resp, err := c.b.Schedules.GetSchedule(r.Context(), &coordv1.GetScheduleRequest{Name: name, Next: 5})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	queue := resp.GetSchedule().GetSpec().GetJob().GetQueue()
	d := scheduleData{GetScheduleResponse: resp, Queue: queue, CanAct: c.allowed(r.Context(), "job", queue)}
	c.render(w, r, httpStatus, "schedule", "Schedule "+name, d, perr)
}

func (c *Console) scheduleAction(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	c.act(w, r, "schedule", "pause, resume or trigger", map[string]func(context.Context) error{
		"pause":   dropAnswer(c.b.Schedules.PauseSchedule, &coordv1.PauseScheduleRequest{Name: name}),
		"resume":  dropAnswer(c.b.Schedules.ResumeSchedule, &coordv1.ResumeScheduleRequest{Name: name}),
		"trigger": dropAnswer(c.b.Schedules.TriggerSchedule, &coordv1.TriggerScheduleRequest{Name: name}),
	}, "/ui/schedules/"+url.PathEscape(name), c.showSchedule)
}

type resourcesData struct {
	Name     string
	Resource *coordv1.Resource
}

func (c *Console) resourcesPage(w http.ResponseWriter, r *http.Request) {
	d := resourcesData{Name: r.URL.Query().Get("name")}
	if d.Name == "" {
		c.render(w, r, http.StatusOK, "resources", "Fenced resources", d, nil)
		return
	}
	resp, err := c.b.Coordinator.GetResource(r.Context(), &coordv1.GetResourceRequest{Resource: d.Name})
	if err != nil {
		perr, code := c.explain(r.Context(), err)
		c.render(w, r, c.cfg.HTTPStatus(code), "resources", "Fenced resources", d, perr)
		return
	}
	d.Resource = resp.GetResource()
	c.render(w, r, http.StatusOK, "resources", "Fenced resources", d, nil)
}

// sortedKeys returns a map's keys in order (labels).
func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// queueAction pauses or resumes the queue the path names.
func (c *Console) queueAction(w http.ResponseWriter, r *http.Request) {
	queue := r.PathValue("queue")
	var err error
	switch action := r.PathValue("action"); action {
	case "pause":
		_, err = c.b.Queue.Pause(r.Context(), &coordv1.QueuePauseRequest{Queue: queue})
	case "resume":
		_, err = c.b.Queue.Resume(r.Context(), &coordv1.QueueResumeRequest{Queue: queue})
	default:
		c.fail(w, r, http.StatusNotFound, "Unknown queue action "+strconv.Quote(action)+" (pause or resume)")
		return
	}
	if err != nil {
		perr, code := c.explain(r.Context(), err)
		perr.Message = r.PathValue("action") + " refused: " + perr.Message
		c.showQueues(w, r, c.cfg.HTTPStatus(code), perr)
		return
	}
	http.Redirect(w, r, "/ui/queues?done=queue-"+r.PathValue("action"), http.StatusSeeOther)
}
