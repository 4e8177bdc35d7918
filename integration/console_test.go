package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"github.com/chromedp/chromedp"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// consoleACL: ops may do everything, viewer only read.
const consoleACL = `
rules:
  - name: nodes
    identities: [node*]
    node_certificates: true
    ops: [admin]
  - name: operators
    identities: [ops]
    ops: [admin, read, job, work, lease, fence]
  - name: viewers
    identities: [viewer]
    ops: [read]
`

// chromiumPath finds Debian's chromium (scripts/test.sh installs it). In CI
// its absence fails the test; elsewhere it skips.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed: scripts/test.sh installs Debian's chromium package (as root)")
	}
	t.Skip("chromium is not installed (scripts/test.sh installs Debian's chromium package when run as root): skipping the browser test")
	return ""
}

// identityProxy is a plain-HTTP loopback front for the browser that calls
// the node's HTTPS port with identity's client certificate: the browser
// stands for a user holding that certificate (headless Chromium cannot be
// handed a client certificate without a system policy). The Host header is
// kept, so the console's same-origin check sees the browser's origin.
func identityProxy(t *testing.T, certs *testcluster.Certs, httpsAddr, identity string) string {
	t.Helper()
	target := &url.URL{Scheme: "https", Host: httpsAddr}
	p := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		Transport: &http.Transport{TLSClientConfig: certs.Client(identity)},
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv.URL
}

// noLeaderRetry calls call until it succeeds, retrying while the cluster
// answers NO_LEADER or NOT_LEADER (nothing was applied; a busy machine can
// move leadership during the test), for at most 30 s.
func noLeaderRetry[T any](t *testing.T, what string, call func() (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := call()
		if err == nil {
			return v
		}
		if r := coorderr.WireReason(err); (r != "NO_LEADER" && r != "NOT_LEADER") || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConsoleInBrowser loads every page of the console in headless
// Chromium against a three-node cluster with mutual TLS and an ACL: no
// console errors or exceptions, the lease (and one acquired while the page
// is open, through the live Watch), a dead job with its error, a
// schedule's next run; retrying the dead job works for ops and is refused
// for viewer. COORDD_CONSOLE_SCREENSHOTS=dir writes PNG screenshots of the
// main pages there (docs/console holds them).
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	chromium := chromiumPath(t)
	c, certs, _ := secureCluster(t, 3, consoleACL, testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.HTTPAddr = "127.0.0.1:0"
		cfg.API.ConsoleSampleInterval = time.Second // the chart fills during the test
	}))
	leader := c.WaitLeader()
	ctx := context.Background()

	// The state to show: a lease, a fenced resource, a dead job, a
	// succeeded one, a schedule.
	conn := connAs(t, certs.Client("ops"), leader.API.GRPCAddr())
	coord, queue, scheds := coordv1.NewCoordinatorClient(conn), coordv1.NewQueueClient(conn), coordv1.NewSchedulesClient(conn)
	noLeaderRetry(t, "acquire", func() (*coordv1.AcquireResponse, error) {
		return coord.Acquire(ctx, &coordv1.AcquireRequest{Name: "billing/daily-close", Owner: "worker-7", Ttl: pbtime.Dur(120_000),
			Value: []byte("10.0.0.7:8080"), RequestId: "console-test-1"})
	})
	noLeaderRetry(t, "commit", func() (*coordv1.FencedCommitResponse, error) {
		return coord.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "ledger/accounts", Token: "billing/daily-close:1",
			IdempotencyKey: "close-2026-11-30"})
	})
	sub := noLeaderRetry(t, "submit", func() (*coordv1.QueueSubmitResponse, error) {
		return queue.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{
			{Queue: "billing", Kind: "charge-card", Args: []byte(`{"invoice":1017,"amount_cents":4200}`), MaxAttempts: 1, UniqueKey: "1017"},
			{Queue: "billing", Kind: "send-receipt", Args: []byte(`{"invoice":1016}`), UniqueKey: "1016"},
			{Queue: "reports", Kind: "report", Delay: pbtime.Dur(3_600_000), UniqueKey: "weekly"},
		}})
	})
	dead, done := sub.GetJobs()[0].GetId(), sub.GetJobs()[1].GetId()
	fetched := noLeaderRetry(t, "fetch", func() (*coordv1.QueueFetchResponse, error) {
		return queue.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"billing"}, Max: 2, WorkerId: "worker-7"})
	})
	if len(fetched.GetJobs()) != 2 {
		t.Fatalf("fetched %v", fetched)
	}
	const failure = "card declined: insufficient funds (gateway code 51)"
	noLeaderRetry(t, "fail", func() (*coordv1.QueueFailResponse, error) {
		return queue.Fail(ctx, &coordv1.QueueFailRequest{WorkerId: "worker-7",
			Failures: []*coordv1.JobFailure{{JobId: dead, Attempt: 1, Error: failure}}})
	})
	noLeaderRetry(t, "complete", func() (*coordv1.QueueCompleteResponse, error) {
		return queue.Complete(ctx, &coordv1.QueueCompleteRequest{WorkerId: "worker-7",
			Completions: []*coordv1.JobCompletion{{JobId: done, Attempt: 1, Result: []byte(`{"sent":true}`)}}})
	})
	noLeaderRetry(t, "put schedule", func() (*coordv1.PutScheduleResponse, error) {
		return scheds.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "nightly-report",
			Schedule: "0 2 * * *", TimeZone: "UTC", Job: &coordv1.JobTemplate{Queue: "reports", Kind: "report"}}})
	})
	noLeaderRetry(t, "trigger", func() (*coordv1.TriggerScheduleResponse, error) {
		return scheds.TriggerSchedule(ctx, &coordv1.TriggerScheduleRequest{Name: "nightly-report"})
	})
	var nextRun string // once the leader has materialised it, its next due time is the next occurrence
	c.Eventually("the schedule materialised", 20*time.Second, func() bool {
		sched, err := scheds.GetSchedule(ctx, &coordv1.GetScheduleRequest{Name: "nightly-report"})
		if err != nil || len(sched.GetNext()) == 0 || sched.GetSchedule().GetNextDueMs() != sched.GetNext()[0].GetAtMs() {
			return false
		}
		nextRun = time.UnixMilli(sched.GetNext()[0].GetAtMs()).UTC().Format("2006-01-02 15:04:05Z")
		return true
	})

	ops := identityProxy(t, certs, leader.API.HTTPAddr(), "ops")
	viewer := identityProxy(t, certs, leader.API.HTTPAddr(), "viewer")

	// The browser.
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 800)); err != nil { // starts the browser (no timeout on this context)
		t.Fatalf("start chromium: %v", err)
	}
	var (
		mu       sync.Mutex
		messages []chromedp.ConsoleMessage
	)
	lctx, stopListen := context.WithCancel(bctx)
	defer stopListen()
	msgs := chromedp.Console(lctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			mu.Lock()
			messages = append(messages, m)
			mu.Unlock()
		}
	}()
	// problems returns the errors, warnings and exceptions logged since
	// the last call.
	problems := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, m := range messages {
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				out = append(out, fmt.Sprintf("%s (%s)", m.String(), m.URL))
			}
		}
		messages = nil
		return out
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 15*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	shots := os.Getenv("COORDD_CONSOLE_SCREENSHOTS") // relative to the repository root
	if shots != "" && !filepath.IsAbs(shots) {
		shots = filepath.Join("..", shots) // tests run in integration/
	}
	if shots != "" {
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	screenshot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		sctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// open loads a page until it shows sel; a page that says the cluster
	// has no leader right now (503: a busy machine can move leadership)
	// is loaded again, and its logged 503 dropped.
	open := func(what, url, sel string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			run(what, chromedp.Navigate(url))
			if ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q) !== null`, sel))); err == nil && ok {
				return
			}
			banner, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.getElementById("error") || {}).textContent || ""`))
			if !regexp.MustCompile(`NO_LEADER|NOT_LEADER|LEADERSHIP_LOST|UNAVAILABLE`).MatchString(banner) || time.Now().After(deadline) {
				t.Fatalf("%s: %s not shown (%s)", what, sel, banner)
			}
			mu.Lock()
			kept := messages[:0]
			for _, m := range messages {
				if !strings.Contains(m.Text, "503") {
					kept = append(kept, m)
				}
			}
			messages = kept
			mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
	}
	expectClean := func(page string) {
		t.Helper()
		if p := problems(); len(p) > 0 {
			t.Errorf("%s: console problems:\n%s", page, strings.Join(p, "\n"))
		}
	}
	contains := func(page, got string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q not shown in %q", page, w, got)
			}
		}
	}

	// Cluster: the node leads (a busy machine may move leadership for a
	// while) and has measured its members' clocks.
	c.Eventually("the cluster page shows the leader with clock offsets", 30*time.Second, func() bool {
		open("cluster page", ops+"/ui/", "#members")
		return text("#node-state") == "Leader" && strings.Count(text("#members"), " ms ± ") == 3
	})
	contains("cluster", text("#members"), "node1", "node2", "node3", "leader")
	contains("cluster", text("#leader-id"), leader.ID)
	screenshot("cluster")
	expectClean("cluster")

	// Leases: the lease, then one acquired while the page is open (Watch).
	open("leases page", ops+"/ui/leases", `tr[data-key="billing/daily-close"]`)
	contains("leases", text(`tr[data-key="billing/daily-close"]`), "worker-7", "ops", "held", "10.0.0.7:8080")
	run("live updates start", chromedp.WaitVisible(chromedp.CSS("#live.on")))
	noLeaderRetry(t, "acquire", func() (*coordv1.AcquireResponse, error) {
		return coord.Acquire(ctx, &coordv1.AcquireRequest{Name: "billing/invoices", Owner: "worker-9", Ttl: pbtime.Dur(60_000), RequestId: "console-test-2"})
	})
	run("a lease acquired while the page is open appears", chromedp.WaitVisible(chromedp.CSS(`tr[data-key="billing/invoices"]`)))
	contains("leases (live)", text(`tr[data-key="billing/invoices"]`), "worker-9", "held")
	screenshot("leases")
	expectClean("leases")

	// Queues.
	open("queues page", ops+"/ui/queues", "#queues")
	contains("queues", text("#queues"), "billing", "reports")
	// The chart: the sampler (every second here) saw the success and the
	// failure.
	c.Eventually("the chart shows the finished jobs", 20*time.Second, func() bool {
		open("queues page", ops+"/ui/queues", "svg.chart")
		return text("#queues tbody tr:first-child td.col-hour") == "1 / 1"
	})
	run("chart bars", chromedp.WaitVisible(chromedp.CSS("svg.chart rect.ok")), chromedp.WaitVisible(chromedp.CSS("svg.chart rect.bad")))
	screenshot("queues")
	expectClean("queues")

	// Jobs: the dead one in the list and on its page with its error.
	open("jobs page", ops+"/ui/jobs?queue=billing", "#jobs")
	contains("jobs", text("#jobs"), fmt.Sprint(dead), "charge-card", "dead", "send-receipt", "succeeded")
	screenshot("jobs")
	expectClean("jobs")
	// Search by kind: only that kind's jobs.
	open("jobs search", ops+"/ui/jobs?kind=charge-card", "#jobs")
	if got := text("#jobs tbody"); !strings.Contains(got, "charge-card") || strings.Contains(got, "send-receipt") {
		t.Errorf("search by kind: %q", got)
	}
	// Search in args (a bounded scan): the invoice's job.
	open("jobs args search", ops+"/ui/jobs?args=1016", "#scanned")
	if got := text("#jobs tbody"); !strings.Contains(got, "send-receipt") || strings.Contains(got, "charge-card") {
		t.Errorf("search in args: %q", got)
	}
	// Auto-refresh: a job submitted while the page is open appears
	// without a reload.
	open("jobs page", ops+"/ui/jobs?queue=billing", "#jobs")
	late := noLeaderRetry(t, "submit", func() (*coordv1.QueueSubmitResponse, error) {
		return queue.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "billing", Kind: "refund", UniqueKey: "late"}}})
	}).GetJobs()[0].GetId()
	run("the page refreshes itself", chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#jobs tr[data-id="%d"]`, late))))
	contains("jobs (refreshed)", text("#refreshed"), "updated")
	expectClean("jobs (refreshed)")
	jobPage := fmt.Sprintf("/ui/jobs/%d", dead)
	open("job page", ops+jobPage, "#attempts")
	contains("job", text("#attempts"), failure, fmt.Sprintf("job:%d:1", dead), "worker-7")
	contains("job", text("#args"), `"invoice": 1017`)
	contains("job", text("#job-state"), "dead")
	screenshot("job")
	expectClean("job")

	// Schedules: the next run.
	open("schedules page", ops+"/ui/schedules", "#schedules")
	contains("schedules", text("#schedules .next-run"), nextRun)
	screenshot("schedules")
	expectClean("schedules")
	open("schedule page", ops+"/ui/schedules/nightly-report", "#next")
	contains("schedule", text("#next-run"), nextRun)
	contains("schedule", text("#recent"), "triggered", "/manual-", "available")
	if !regexp.MustCompile(`02:00:00Z`).MatchString(text("#next")) {
		t.Errorf("schedule: next occurrences %q are not at 02:00", text("#next"))
	}
	screenshot("schedule")
	expectClean("schedule")

	// Fenced resources.
	open("resources page", ops+"/ui/resources?name=ledger/accounts", "#resource")
	contains("resources", text("#max-generation"), "billing/daily-close:1")
	run("live updates start", chromedp.WaitVisible(chromedp.CSS("#live.on")))
	noLeaderRetry(t, "commit", func() (*coordv1.FencedCommitResponse, error) {
		return coord.FencedCommit(ctx, &coordv1.FencedCommitRequest{Resource: "ledger/accounts", Token: "billing/daily-close:1",
			IdempotencyKey: "close-2026-12-01"})
	})
	run("a commit appears", chromedp.WaitVisible(chromedp.CSS("#live-commits tbody tr")))
	contains("resources (live)", text("#live-commits"), "close-2026-12-01")
	screenshot("resources")
	expectClean("resources")

	// A read-only identity: the button is disabled, and a retry posted
	// anyway is refused with the reason; the job stays dead.
	open("job page as viewer", viewer+jobPage, "#readonly")
	contains("job as viewer", text("#identity"), "viewer")
	if disabled, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.getElementById("retry").disabled`)); err != nil || !disabled {
		t.Fatalf("viewer's retry button: disabled=%v err=%v", disabled, err)
	}
	run("post the retry form anyway", chromedp.Evaluate[chromedp.Void](`document.getElementById("retry-form").submit()`),
		chromedp.WaitVisible(chromedp.CSS("#error")))
	contains("refused retry", text("#error"), "retry refused", `identity "viewer" may not job`, "PERMISSION_DENIED", "read-only")
	// The refusal is a 403 response, which the browser logs; nothing else.
	for _, p := range problems() {
		if !strings.Contains(p, "403") {
			t.Errorf("refused retry: console problem %s", p)
		}
	}
	get := func() (*coordv1.QueueGetResponse, error) { return queue.Get(ctx, &coordv1.QueueGetRequest{Id: dead}) }
	if j := noLeaderRetry(t, "get", get); j.GetJob().GetState() != coordv1.JobState_JOB_STATE_DEAD {
		t.Fatalf("after the refused retry: %v", j.GetJob().GetState())
	}

	// ops retries it.
	open("job page", ops+jobPage, "#retry")
	run("retry as ops", chromedp.Click(chromedp.CSS("#retry")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	contains("retried", text("#flash"), "Job retried")
	contains("retried", text("#job-state"), "available")
	expectClean("retry")
	if j := noLeaderRetry(t, "get", get); j.GetJob().GetState() != coordv1.JobState_JOB_STATE_AVAILABLE {
		t.Fatalf("after the retry: %v", j.GetJob().GetState())
	}

	// Bulk retry through the page: three dead refunds, retried with one
	// click (confirmed), the operation's progress refreshed on the page.
	var refunds []*coordv1.NewJob
	for i := range 3 {
		refunds = append(refunds, &coordv1.NewJob{Queue: "refunds", Kind: "refund", MaxAttempts: 1, UniqueKey: fmt.Sprint("refund-", i)})
	}
	subR := noLeaderRetry(t, "submit refunds", func() (*coordv1.QueueSubmitResponse, error) {
		return queue.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: refunds})
	})
	got := noLeaderRetry(t, "fetch refunds", func() (*coordv1.QueueFetchResponse, error) {
		return queue.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"refunds"}, Max: 3, WorkerId: "worker-7"})
	})
	fails := &coordv1.QueueFailRequest{WorkerId: "worker-7"}
	for _, j := range got.GetJobs() {
		fails.Failures = append(fails.Failures, &coordv1.JobFailure{JobId: j.GetJob().GetId(), Attempt: j.GetAttempt().GetNumber(), Error: "gateway down"})
	}
	noLeaderRetry(t, "fail refunds", func() (*coordv1.QueueFailResponse, error) { return queue.Fail(ctx, fails) })
	open("dead refunds", ops+"/ui/jobs?queue=refunds&state=DEAD", "#bulk-retry")
	if n := strings.Count(text("#jobs tbody"), "dead"); n != 3 {
		t.Fatalf("%d dead refunds listed", n)
	}
	run("bulk retry, confirmed", chromedp.Evaluate[chromedp.Void](`window.confirm = function () { return true; }`),
		chromedp.Click(chromedp.CSS("#bulk-retry")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	contains("bulk retry", text("#flash"), "Bulk retry started")
	run("the operation finishes on the page", chromedp.WaitVisible(chromedp.CSS(`#bulk-ops td.state.succeeded`)))
	contains("bulk retry", text("#bulk-ops"), "3 done, 0 skipped of 3 (finished)", "queue=refunds state=dead", "ops")
	screenshot("jobs-bulk")
	expectClean("bulk retry")
	for _, j := range subR.GetJobs() {
		id := j.GetId()
		if r := noLeaderRetry(t, "get", func() (*coordv1.QueueGetResponse, error) { return queue.Get(ctx, &coordv1.QueueGetRequest{Id: id}) }); r.GetJob().GetState() != coordv1.JobState_JOB_STATE_AVAILABLE {
			t.Errorf("refund %d after the bulk retry: %v", id, r.GetJob().GetState())
		}
	}

	// Workers: a worker that holds an attempt, with what it runs.
	noLeaderRetry(t, "fetch a refund", func() (*coordv1.QueueFetchResponse, error) {
		return queue.Fetch(ctx, &coordv1.QueueFetchRequest{Queues: []string{"refunds"}, Max: 1, WorkerId: "worker-9"})
	})
	open("workers page", ops+"/ui/workers", `tr[data-worker="worker-9"]`)
	contains("workers", text(`tr[data-worker="worker-9"]`), "ops", "refunds / refund, attempt 2")
	screenshot("workers")
	expectClean("workers")
}
