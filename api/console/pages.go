package console

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

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

type leasesData struct {
	Prefix   string
	Leases   []*coordv1.Lease
	Next     string
	NowMs    int64
	IsFirst  bool
	FirstURL string
}

func (c *Console) leasesPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix, tok := q.Get("prefix"), q.Get("page_token")
	resp, err := c.b.Coordinator.ListLeases(r.Context(), &coordv1.ListLeasesRequest{Prefix: prefix, PageToken: tok, PageSize: leasePage})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	d := leasesData{Prefix: prefix, Leases: resp.GetLeases(), IsFirst: tok == "",
		FirstURL: "/ui/leases?" + url.Values{"prefix": {prefix}}.Encode()}
	if n := resp.GetNextPageToken(); n != "" {
		d.Next = "/ui/leases?" + url.Values{"prefix": {prefix}, "page_token": {n}}.Encode()
	}
	c.render(w, r, http.StatusOK, "leases", "Leases", d, nil)
}

type queuesData struct {
	Stats    *coordv1.QueueStatsResponse
	Chart    any
	Hour     map[string]Counters
	Interval string
	Window   string // the chart's span
	Samples  int
}

func (c *Console) queuesPage(w http.ResponseWriter, r *http.Request) {
	resp, err := c.b.Queue.Stats(r.Context(), &coordv1.QueueStatsRequest{})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	pts, sums := c.ring.series()
	d := queuesData{Stats: resp, Chart: chartSVG(pts, ChartPoints-1, c.cfg.SampleInterval), Hour: sums,
		Interval: durMs(c.cfg.SampleInterval.Milliseconds()), Window: durMs(int64(ChartPoints-1) * c.cfg.SampleInterval.Milliseconds()),
		Samples: len(pts)}
	c.render(w, r, http.StatusOK, "queues", "Queues", d, nil)
}

type jobsData struct {
	Queue, Kind, State string
	States             []string
	Jobs               []*coordv1.QueueJob
	Next               string
	IsFirst            bool
	FirstURL           string
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
	q := r.URL.Query()
	d := jobsData{Queue: q.Get("queue"), Kind: q.Get("kind"), State: strings.ToUpper(q.Get("state")), States: jobStates}
	state, ok := parseState(d.State)
	if !ok {
		c.fail(w, r, http.StatusBadRequest, "Unknown job state "+strconv.Quote(d.State)+": one of "+strings.Join(jobStates, ", "))
		return
	}
	tok := q.Get("page_token")
	resp, err := c.b.Queue.List(r.Context(), &coordv1.QueueListRequest{Queue: d.Queue, Kind: d.Kind, State: state,
		PageSize: jobPage, PageToken: tok})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	filter := url.Values{}
	for k, v := range map[string]string{"queue": d.Queue, "kind": d.Kind, "state": d.State} {
		if v != "" {
			filter.Set(k, v)
		}
	}
	d.Jobs, d.IsFirst, d.FirstURL = resp.GetJobs(), tok == "", "/ui/jobs?"+filter.Encode()
	if n := resp.GetNextPageToken(); n != "" {
		filter.Set("page_token", n)
		d.Next = "/ui/jobs?" + filter.Encode()
	}
	c.render(w, r, http.StatusOK, "jobs", "Jobs", d, nil)
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
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		c.fail(w, r, http.StatusBadRequest, "A job id is a positive integer, not "+strconv.Quote(r.PathValue("id")))
		return
	}
	resp, err := c.b.Queue.Get(r.Context(), &coordv1.QueueGetRequest{Id: id})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	j := resp.GetJob()
	d := jobData{Job: j, CalendarMs: resp.GetCalendarMs(), CanAct: c.allowed(r.Context(), "job", j.GetQueue())}
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

func (c *Console) jobAction(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		c.fail(w, r, http.StatusBadRequest, "A job id is a positive integer, not "+strconv.Quote(r.PathValue("id")))
		return
	}
	action := r.PathValue("action")
	switch action {
	case "cancel":
		_, err = c.b.Queue.Cancel(r.Context(), &coordv1.QueueCancelRequest{Id: id})
	case "retry":
		_, err = c.b.Queue.Retry(r.Context(), &coordv1.QueueRetryRequest{Id: id})
	default:
		c.fail(w, r, http.StatusNotFound, "Unknown job action "+strconv.Quote(action)+" (cancel or retry)")
		return
	}
	if err != nil {
		perr, code := c.explain(r.Context(), err)
		perr.Message = action + " refused: " + perr.Message
		c.showJob(w, r, c.cfg.HTTPStatus(code), perr)
		return
	}
	http.Redirect(w, r, "/ui/jobs/"+strconv.FormatUint(id, 10)+"?done="+action, http.StatusSeeOther)
}

type schedulesData struct {
	Prefix     string
	Schedules  []scheduleRow
	Overdue    int64
	CalendarMs int64
	Next       string
	IsFirst    bool
	FirstURL   string
}

type scheduleRow struct {
	*coordv1.Schedule
	Overdue int64
}

func (c *Console) schedulesPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix, tok := q.Get("prefix"), q.Get("page_token")
	resp, err := c.b.Schedules.ListSchedules(r.Context(), &coordv1.ListSchedulesRequest{Prefix: prefix, PageToken: tok, PageSize: schedulePage})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	d := schedulesData{Prefix: prefix, CalendarMs: resp.GetCalendarMs(), IsFirst: tok == "",
		FirstURL: "/ui/schedules?" + url.Values{"prefix": {prefix}}.Encode()}
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
	if n := resp.GetNextPageToken(); n != "" {
		d.Next = "/ui/schedules?" + url.Values{"prefix": {prefix}, "page_token": {n}}.Encode()
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
	name, action := r.PathValue("name"), r.PathValue("action")
	var err error
	switch action {
	case "pause":
		_, err = c.b.Schedules.PauseSchedule(r.Context(), &coordv1.PauseScheduleRequest{Name: name})
	case "resume":
		_, err = c.b.Schedules.ResumeSchedule(r.Context(), &coordv1.ResumeScheduleRequest{Name: name})
	case "trigger":
		_, err = c.b.Schedules.TriggerSchedule(r.Context(), &coordv1.TriggerScheduleRequest{Name: name})
	default:
		c.fail(w, r, http.StatusNotFound, "Unknown schedule action "+strconv.Quote(action)+" (pause, resume or trigger)")
		return
	}
	if err != nil {
		perr, code := c.explain(r.Context(), err)
		perr.Message = action + " refused: " + perr.Message
		c.showSchedule(w, r, c.cfg.HTTPStatus(code), perr)
		return
	}
	http.Redirect(w, r, "/ui/schedules/"+url.PathEscape(name)+"?done="+action, http.StatusSeeOther)
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
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
