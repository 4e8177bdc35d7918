// Package deploy holds coordd's operations files: Prometheus rules
// (prometheus/coordd-rules.yml, with promtool unit tests) and a Grafana
// dashboard (grafana/coordd-dashboard.json). Its tests check them: promtool
// accepts the rules and their unit tests, the dashboard is well formed, and
// every coordd metric, label and label value they name is one a running
// node exports.
package deploy

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"sigs.k8s.io/yaml"

	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

const (
	rulesFile     = "prometheus/coordd-rules.yml"
	rulesTestFile = "prometheus/coordd-rules_test.yml"
	dashboardFile = "grafana/coordd-dashboard.json"
)

// rules is the part of a Prometheus rule file the tests read.
type rules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record      string            `json:"record"`
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// readFile reads the file at path into a T with unmarshal; the test fails
// if it cannot.
func readFile[T any](t *testing.T, path string, unmarshal func([]byte, any) error) T {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v T
	if err := unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func readRules(t *testing.T) rules {
	t.Helper()
	r := readFile[rules](t, rulesFile, func(b []byte, v any) error { return yaml.Unmarshal(b, v) })
	if len(r.Groups) == 0 {
		t.Fatalf("%s: no groups", rulesFile)
	}
	return r
}

// panel is the part of a Grafana panel the tests read.
type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	return readFile[dashboard](t, dashboardFile, json.Unmarshal)
}

// allPanels flattens rows (collapsed rows keep their panels inside).
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// expression is one PromQL expression and where it comes from.
type expression struct{ where, expr string }

// expressions are every PromQL expression of the rules and the dashboard
// (panel targets and the variables' label_values queries).
func expressions(t *testing.T) []expression {
	t.Helper()
	var out []expression
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			out = append(out, expression{rulesFile + ": " + r.Alert + r.Record, r.Expr})
		}
	}
	d := readDashboard(t)
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			out = append(out, expression{dashboardFile + ": panel " + p.Title, tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			out = append(out, expression{dashboardFile + ": variable " + v.Name, v.Definition})
		}
	}
	return out
}

// The dashboard parses, uses the datasource variable everywhere, and every
// panel but a row has a grid position and at least one query.
func TestDashboardWellFormed(t *testing.T) {
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 36 {
		t.Fatalf("title %q, uid %q, schemaVersion %d", d.Title, d.UID, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	for name, typ := range map[string]string{"datasource": "datasource", "job": "query", "instance": "query", "queue": "query"} {
		if vars[name] != typ {
			t.Errorf("variable %s: type %q, want %q", name, vars[name], typ)
		}
	}
	const ds = `{"type":"prometheus","uid":"${datasource}"}`
	ids := map[int]string{}
	rows, queries := 0, 0
	for _, p := range allPanels(d.Panels) {
		if prev, ok := ids[p.ID]; ok || p.ID == 0 {
			t.Errorf("panel %q: id %d not unique (also %q)", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: bad gridPos %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			rows++
			continue
		}
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if compact(t, p.Datasource) != ds {
			t.Errorf("panel %q: datasource %s, want %s", p.Title, p.Datasource, ds)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: target %q has no expression or a repeated refId", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if compact(t, tg.Datasource) != ds {
				t.Errorf("panel %q target %s: datasource %s", p.Title, tg.RefID, tg.Datasource)
			}
			queries++
		}
	}
	var titles []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			titles = append(titles, p.Title)
		}
	}
	for _, want := range []string{"Cluster", "Apply latency", "Leases", "Queues", "Schedules", "Watch"} {
		if !slices.Contains(titles, want) {
			t.Errorf("no row %q (rows: %v)", want, titles)
		}
	}
	t.Logf("%d rows, %d panels, %d queries", rows, len(ids)-rows, queries)
}

func compact(t *testing.T, raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Every alert has a severity and says what it means and what to do first.
func TestAlertsAnnotated(t *testing.T) {
	alerts := 0
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				if !strings.HasPrefix(r.Record, "coordd:") {
					t.Errorf("recording rule %q: want a coordd:level:operation name", r.Record)
				}
				continue
			}
			alerts++
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || !strings.Contains(r.Annotations["description"], "First:") {
				t.Errorf("%s: want a summary and a description with the first thing to do", r.Alert)
			}
		}
	}
	if alerts < 10 {
		t.Fatalf("only %d alerts", alerts)
	}
}

// Every alert has a promtool unit test that expects it to fire and one
// that expects it not to (at another time, or on other series).
func TestEveryAlertTested(t *testing.T) {
	type ruleTests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	rt := readFile[ruleTests](t, rulesTestFile, func(b []byte, v any) error { return yaml.Unmarshal(b, v) })
	fires, silent := map[string]int{}, map[string]int{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname]++
			} else {
				silent[a.Alertname]++
			}
		}
	}
	alerts := 0
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if fires[r.Alert] == 0 || silent[r.Alert] == 0 {
				t.Errorf("%s: %d cases expect it to fire, %d expect silence: want both", r.Alert, fires[r.Alert], silent[r.Alert])
			}
			delete(fires, r.Alert)
			delete(silent, r.Alert)
		}
	}
	for name := range fires {
		t.Errorf("%s: tests for an alert the rules do not have", name)
	}
	for name := range silent {
		t.Errorf("%s: tests for an alert the rules do not have", name)
	}
	t.Logf("%d alerts, each tested firing and silent", alerts)
}

// promtool accepts the rules and passes their unit tests, and every
// dashboard expression parses (checked as a recording rule, with the
// dashboard's variables filled in).
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus; scripts/test.sh installs it)")
	}
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run(".", "check", "rules", rulesFile)
	run(filepath.Dir(rulesTestFile), "test", "rules", filepath.Base(rulesTestFile))

	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", "coordd", "$instance", ".*", "$queue", ".*")
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rs []rule
	d := readDashboard(t)
	for i, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			rs = append(rs, rule{Record: "dashboard:panel" + string(rune('a'+i%26)) + ":" + tg.RefID, Expr: vars.Replace(tg.Expr)})
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rs}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	run(".", "check", "rules", f)
}

var (
	metricName = regexp.MustCompile(`\bcoordd_[a-zA-Z0-9_]+`)
	// a selector's matchers: name{label op "value", ...}
	selector = regexp.MustCompile(`\b(coordd_[a-zA-Z0-9_]+)\s*\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	grouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	plainAlt = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)
)

// family is what a scrape says about one metric.
type family struct {
	histogram bool
	labels    map[string]map[string]bool // label name -> values seen
}

// Every coordd metric the rules and the dashboard name is exported by a
// running node, with the labels they select, group by or match on, and
// the label values they match literally. The node is exercised first so
// that the labelled series exist: leases acquired, refused and lost,
// fenced commits accepted and refused, a window claimed, completed and
// refused, queued jobs handed out, dead and available, a refused
// heartbeat, a schedule nobody runs (overdue), one skipping overlaps, and
// a watch stream opened and closed.
func TestMetricNamesExported(t *testing.T) {
	exprs := expressions(t)
	wanted := map[string][]string{} // name -> where
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e.expr, -1) {
			wanted[n] = append(wanted[n], e.where)
		}
	}
	if len(wanted) < 30 {
		t.Fatalf("only %d coordd metric names found in the rules and the dashboard", len(wanted))
	}

	c := testcluster.New(t, 1, testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.MonitorInterval = 100 * time.Millisecond
	}))
	n := c.WaitLeader()
	exercise(t, c, n)

	// Poll the scrape until every name is there and the overdue
	// occurrences and the skipped overlaps (a couple of seconds after the
	// schedules are put) show, or the deadline passes: then report what is
	// missing.
	var fams map[string]*family
	var missing []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		fams = gather(t, n)
		missing = missing[:0]
		for name := range wanted {
			if _, ok := lookup(fams, name); !ok {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 && hasValue(fams, "coordd_schedule_overdue_occurrences", "queue", "deploy-sched") &&
			hasValue(fams, "coordd_schedule_occurrences_skipped_total", "reason", "overlap") || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		for _, m := range missing {
			t.Errorf("%s is not exported by coordd (used in %s)", m, strings.Join(wanted[m], "; "))
		}
		t.FailNow()
	}

	for _, e := range exprs {
		checkLabels(t, e, fams)
	}
	t.Logf("%d expressions name %d coordd metrics, all exported", len(exprs), len(wanted))
	var unused []string
	for name, f := range fams {
		if strings.HasPrefix(name, "coordd_") && !used(wanted, name, f.histogram) {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	t.Logf("exported and in neither the rules nor the dashboard: %v", unused)
}

// lookup finds a name in a scrape: a family, or a histogram's _bucket,
// _sum or _count series.
func lookup(fams map[string]*family, name string) (*family, bool) {
	if f, ok := fams[name]; ok {
		return f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := fams[base]; ok && f.histogram {
				if suffix == "_bucket" {
					f2 := &family{histogram: true, labels: map[string]map[string]bool{"le": {}}}
					for k, v := range f.labels {
						f2.labels[k] = v
					}
					return f2, true
				}
				return f, true
			}
		}
	}
	return nil, false
}

// unproducible are label values a healthy test node does not produce,
// each with the source file that sets it and the text that must be there.
var unproducible = map[[3]string][2]string{
	// A Raft error on a proposal: lost leadership, a timeout, a shut-down
	// Raft.
	{"coordd_proposals_total", "outcome", "error"}: {"../node/leader.go", `proposed(cmd.GetType(), "error")`},
}

// checkLabels checks an expression's label matchers and groupings against
// the scrape. job and instance are the target's labels (Prometheus adds
// them); le is a histogram bucket's.
func checkLabels(t *testing.T, e expression, fams map[string]*family) {
	t.Helper()
	known := map[string]bool{"job": true, "instance": true}
	for _, m := range selector.FindAllStringSubmatch(e.expr, -1) {
		f, _ := lookup(fams, m[1])
		if f == nil {
			continue // reported as missing
		}
		for _, mm := range matcher.FindAllStringSubmatch(m[2], -1) {
			label, op, value := mm[1], mm[2], mm[3]
			if known[label] {
				continue
			}
			values, ok := f.labels[label]
			if !ok {
				t.Errorf("%s: %s has no label %q", e.where, m[1], label)
				continue
			}
			if strings.Contains(value, "$") || (op != "=" && op != "=~") {
				continue
			}
			alts := []string{value}
			if op == "=~" {
				if !plainAlt.MatchString(value) {
					continue
				}
				alts = strings.Split(value, "|")
			}
			for _, v := range alts {
				if src, ok := unproducible[[3]string{m[1], label, v}]; ok {
					if b, err := os.ReadFile(src[0]); err != nil || !strings.Contains(string(b), src[1]) {
						t.Errorf("%s: %s{%s=%q}: %s no longer has %s", e.where, m[1], label, v, src[0], src[1])
					}
					continue
				}
				if !values[v] {
					t.Errorf("%s: %s{%s=%q}: no such series (values seen: %v)", e.where, m[1], label, v, keys(values))
				}
			}
		}
	}
	// Labels grouped by or matched on must be the target's or belong to a
	// metric of the expression.
	have := map[string]bool{"job": true, "instance": true}
	for _, n := range metricName.FindAllString(e.expr, -1) {
		if f, ok := lookup(fams, n); ok {
			for l := range f.labels {
				have[l] = true
			}
		}
	}
	for _, g := range grouping.FindAllStringSubmatch(e.expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !have[l] {
				t.Errorf("%s: groups by %q, a label none of its metrics has", e.where, l)
			}
		}
	}
}

func used(wanted map[string][]string, name string, histogram bool) bool {
	if _, ok := wanted[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if _, ok := wanted[name+suffix]; ok && histogram {
			return true
		}
	}
	return false
}

func hasValue(fams map[string]*family, name, label, value string) bool {
	f, ok := fams[name]
	return ok && f.labels[label][value]
}

func keys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

// gather reads the node's registry: what /metrics serves.
func gather(t *testing.T, n *testcluster.Node) map[string]*family {
	t.Helper()
	mfs, err := n.API.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*family{}
	for _, mf := range mfs {
		f := &family{histogram: mf.GetType().String() == "HISTOGRAM", labels: map[string]map[string]bool{}}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if f.labels[lp.GetName()] == nil {
					f.labels[lp.GetName()] = map[string]bool{}
				}
				f.labels[lp.GetName()][lp.GetValue()] = true
			}
		}
		out[mf.GetName()] = f
	}
	return out
}

// exercise makes the node export its labelled series.
func exercise(t *testing.T, c *testcluster.Cluster, n *testcluster.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	co := c.Coord(n)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// Leases: acquired, held by another, a refused renew (lost), fenced
	// commits accepted and refused (stale), a window claimed, completed
	// and claimed again (refused).
	a, err := co.Acquire(ctx, &coordv1.AcquireRequest{Name: "deploy/lease", Owner: "a", Ttl: pbtime.Dur(30000)})
	must("acquire", err)
	gen := a.GetLease().GetGeneration()
	if r, err := co.Acquire(ctx, &coordv1.AcquireRequest{Name: "deploy/lease", Owner: "b", Ttl: pbtime.Dur(30000)}); err == nil && r.GetAcquired() {
		t.Fatalf("second acquire: %v", r)
	}
	if _, err := co.Renew(ctx, &coordv1.RenewRequest{Name: "deploy/lease", Owner: "a", Generation: gen + 1, Ttl: pbtime.Dur(30000)}); err == nil {
		t.Fatal("renew of a generation not held succeeded")
	}
	_, err = co.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "deploy/res", LeaseName: "deploy/lease", Generation: gen})
	must("fenced commit", err)
	_, err = co.ClaimWindow(ctx, &coordv1.ClaimWindowRequest{Job: "deploy-job", Window: "w1", LeaseName: "deploy/lease", Owner: "a", Generation: gen})
	must("claim window", err)
	_, err = co.CompleteWindow(ctx, &coordv1.CompleteWindowRequest{Job: "deploy-job", Window: "w1", LeaseName: "deploy/lease", Owner: "a", Generation: gen})
	must("complete window", err)
	// Refused (WINDOW_COMPLETED): the answer says so, counted in
	// coordd_window_refusals_total.
	_, _ = co.ClaimWindow(ctx, &coordv1.ClaimWindowRequest{Job: "deploy-job", Window: "w1", LeaseName: "deploy/lease", Owner: "a", Generation: gen})
	_, err = co.Release(ctx, &coordv1.ReleaseRequest{Name: "deploy/lease", Owner: "a", Generation: gen})
	must("release", err)
	b, err := co.Acquire(ctx, &coordv1.AcquireRequest{Name: "deploy/lease", Owner: "b", Ttl: pbtime.Dur(30000)})
	must("acquire again", err)
	_, err = co.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "deploy/res", LeaseName: "deploy/lease", Generation: b.GetLease().GetGeneration()})
	must("fenced commit, new holder", err)
	if r, err := co.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "deploy/res", LeaseName: "deploy/lease", Generation: gen}); err == nil && r.GetAccepted() {
		t.Fatal("stale fenced commit accepted")
	}

	// Queue: one job handed out and failed for good (dead), one left
	// available, a heartbeat for the dead job's attempt (refused).
	q := coordv1.NewQueueClient(c.Conn(n))
	_, err = q.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{
		{Queue: "deploy-q", Kind: "k", MaxAttempts: 1},
		{Queue: "deploy-q", Kind: "k", Delay: pbtime.Dur(1)},
	}})
	must("submit", err)
	f, err := q.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"deploy-q"}, Max: 1, WorkerId: "w"})
	must("fetch", err)
	if len(f.GetJobs()) != 1 {
		t.Fatalf("fetch: %v", f)
	}
	job, att := f.GetJobs()[0].GetJob().GetId(), f.GetJobs()[0].GetAttempt().GetNumber()
	_, err = q.Fail(ctx, &coordv1.QueueFailRequest{WorkerId: "w", Failures: []*coordv1.JobFailure{{JobId: job, Attempt: att, Error: "boom"}}})
	must("fail", err)
	_, err = q.Heartbeat(ctx, &coordv1.QueueHeartbeatRequest{WorkerId: "w", Attempts: []*coordv1.JobAttemptRef{{JobId: job, Attempt: att}}})
	must("heartbeat", err)

	// Schedules: one nobody runs (overdue after a second), one that skips
	// overlapping occurrences.
	s := coordv1.NewSchedulesClient(c.Conn(n))
	_, err = s.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "deploy-overdue", Schedule: "@every 1s",
		CompleteWithin: pbtime.Dur(1000), Overlap: coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW, Job: &coordv1.JobTemplate{Queue: "deploy-sched", Kind: "k"}}})
	must("put schedule", err)
	_, err = s.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "deploy-skip", Schedule: "@every 1s",
		Overlap: coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID, Job: &coordv1.JobTemplate{Queue: "deploy-skip", Kind: "k"}}})
	must("put schedule", err)

	// Watch: a stream opened, an event received, closed by the client.
	wctx, wcancel := context.WithCancel(ctx)
	w, err := coordv1.NewWatchClient(c.Conn(n)).Watch(wctx, &coordv1.WatchRequest{Prefix: "deploy/", Initial: true})
	must("watch", err)
	_, err = w.Recv()
	must("watch recv", err)
	wcancel()
}
