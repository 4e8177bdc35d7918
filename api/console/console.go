// Package console is coordd's web console, served by every node on its
// HTTP port under /ui/: server-rendered html/template pages (assets
// embedded, no build step) with a little JavaScript for live updates.
//
// It holds no state of its own beyond a small in-memory ring of queue
// counters (the throughput chart) and reaches the cluster only through
// Backend: the node's own service implementations, called in process with
// the caller's identity behind the same guard as the HTTP API (the api
// package wires it), so leader forwarding, consistency, rate limits and
// the ACL are exactly the API's. Pages use paged calls only: none scans
// all jobs, so they stay fast with 100,000 jobs.
//
// Actions (job cancel and retry, schedule pause, resume and trigger) are
// POST forms protected against cross-site request forgery twice: the
// request must be same-origin (http.CrossOriginProtection: Sec-Fetch-Site,
// else Origin against Host) and carry a token bound to the caller's
// identity and this process (an HMAC under a random per-process key). The
// service authorizes them as it authorizes the API's calls; Backend.Allowed
// only decides which buttons are enabled.
package console

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/clock"
	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// Backend is what the console calls: the node's services, each call
// authenticated, rate-limited and authorized for the caller in ctx as an
// HTTP API call is. Only the methods the pages use need to work.
type Backend struct {
	Coordinator coordv1.CoordinatorClient // ListLeases, GetResource
	Cluster     coordv1.ClusterClient     // Status, Members
	Queue       coordv1.QueueClient       // Stats, Targets, List, Get, Cancel, Retry
	Schedules   coordv1.SchedulesClient   // ListSchedules, GetSchedule, ListOverdue, Pause, Resume, Trigger
	// Watch runs a Watch for the caller in ctx, calling send with every
	// message, until ctx ends, send fails or the watch fails.
	Watch func(ctx context.Context, req *coordv1.WatchRequest, send func(*coordv1.WatchResponse) error) error
	// Identity is the caller in ctx ("" without TLS).
	Identity func(ctx context.Context) string
	// Allowed reports whether the caller in ctx may do op ("job") on name
	// (a queue) by the node's ACL. It only enables buttons: the service
	// authorizes the action itself.
	Allowed func(ctx context.Context, op, name string) bool
	// Counters are this node's replica's per-queue event counters (they
	// restart at zero with the node), sampled for the throughput chart.
	Counters func() map[string]Counters
}

// Counters are a queue's cumulative counts of finished work.
type Counters struct {
	Succeeded uint64 // jobs completed
	Failures  uint64 // attempts that failed or lapsed
}

// Config configures a Console.
type Config struct {
	Backend Backend
	// TLS: callers have identities (else the page says the console runs
	// without authentication, as the HTTP API does).
	TLS bool
	// HTTPStatus maps a gRPC code to the HTTP API's status (api.HTTPStatus).
	HTTPStatus func(codes.Code) int
	// Clock drives the sampler (default: the real clock).
	Clock clock.Clock
	// SampleInterval is how often queue counters are sampled (default 1
	// minute); the ring holds ChartPoints samples.
	SampleInterval time.Duration
	// StreamWriteTimeout bounds each write of a live-update stream: the
	// stream moves its write deadline on before every write, so the HTTP
	// server's write timeout (which would end it) does not apply, and a
	// browser that stops reading is dropped after it. 0: the server's.
	StreamWriteTimeout time.Duration
	Logger             *slog.Logger
}

// Console serves the pages.
type Console struct {
	cfg     Config
	b       Backend
	pages   map[string]*template.Template
	mux     *http.ServeMux
	csrfKey []byte
	cop     *http.CrossOriginProtection
	ring    *ring
	stop    chan struct{}
}

// New builds a console; Run samples its chart until stopped.
func New(cfg Config) (*Console, error) {
	cfg.Clock = cmp.Or[clock.Clock](cfg.Clock, clock.Real{})
	cfg.SampleInterval = cmp.Or(cfg.SampleInterval, time.Minute)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.HTTPStatus == nil {
		return nil, errors.New("console: Config.HTTPStatus is required (api.HTTPStatus)")
	}
	c := &Console{cfg: cfg, b: cfg.Backend, csrfKey: make([]byte, 32), cop: http.NewCrossOriginProtection(),
		ring: newRing(ChartPoints), stop: make(chan struct{})}
	if _, err := rand.Read(c.csrfKey); err != nil {
		return nil, err
	}
	var err error
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	c.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusForbidden, "Refused: a cross-origin request (the console accepts actions only from its own pages).")
	}))
	c.routes()
	return c, nil
}

func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", n, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// Handler serves everything under Prefix.
func (c *Console) Handler() http.Handler { return c.mux }

// Close ends the live-update streams (the server calls it before it shuts
// down HTTP: a stream never goes idle).
func (c *Console) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
}

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", cacheFor(time.Hour, http.FileServerFS(static))))
	m.HandleFunc("GET /ui/{$}", c.clusterPage)
	m.HandleFunc("GET /ui/leases", c.leasesPage)
	m.HandleFunc("GET /ui/events", c.events)
	m.HandleFunc("GET /ui/queues", c.queuesPage)
	m.Handle("POST /ui/queues/{queue}/{action}", c.guardPost(c.queueAction))
	m.HandleFunc("GET /ui/jobs", c.jobsPage)
	m.HandleFunc("GET /ui/jobs/{id}", c.jobPage)
	m.Handle("POST /ui/jobs-bulk/{action}", c.guardPost(c.bulkAction))
	m.Handle("POST /ui/jobs/{id}/{action}", c.guardPost(c.jobAction))
	m.HandleFunc("GET /ui/schedules", c.schedulesPage)
	m.HandleFunc("GET /ui/schedules/{name}", c.schedulePage)
	m.Handle("POST /ui/schedules/{name}/{action}", c.guardPost(c.scheduleAction))
	m.HandleFunc("GET /ui/resources", c.resourcesPage)
	m.HandleFunc("GET /ui/windows", c.windowsPage)
	m.HandleFunc("GET /ui/workers", c.workersPage)
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "No such page: "+r.URL.Path)
	})
	c.mux = m
}

func cacheFor(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", fmt.Sprintf("max-age=%d", int(d.Seconds())))
		h.ServeHTTP(w, r)
	})
}

// csrfField is the form field of the CSRF token.
const csrfField = "csrf"

// csrfToken binds a form to the caller's identity and this process.
func (c *Console) csrfToken(ctx context.Context) string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte("coordd-console\x00" + c.identity(ctx)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// guardPost refuses cross-origin requests and forms without this
// process's token for the caller.
func (c *Console) guardPost(h http.HandlerFunc) http.Handler {
	return c.cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		got := r.PostFormValue(csrfField)
		if !hmac.Equal([]byte(got), []byte(c.csrfToken(r.Context()))) {
			c.fail(w, r, http.StatusForbidden, "Refused: the form's CSRF token is missing or stale (this node restarted, or the form came from another node or identity). Reload the page and try again.")
			return
		}
		h(w, r)
	}))
}

func (c *Console) identity(ctx context.Context) string {
	if c.b.Identity == nil {
		return ""
	}
	return c.b.Identity(ctx)
}

func (c *Console) allowed(ctx context.Context, op, name string) bool {
	if c.b.Allowed == nil {
		return !c.cfg.TLS
	}
	return c.b.Allowed(ctx, op, name)
}

// view is what every page template gets.
type view struct {
	Title    string
	Nav      string
	Identity string
	TLS      bool
	CSRF     string
	Flash    string
	Error    *pageError
	Data     any
}

// pageError is a call's failure, shown in a banner.
type pageError struct {
	Code    string
	Reason  string
	Message string
	Hint    string
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, httpStatus int, page, title string, data any, perr *pageError) {
	t, ok := c.pages[page]
	if !ok {
		http.Error(w, "no template "+page, http.StatusInternalServerError)
		return
	}
	v := view{Title: title, Nav: page, Identity: c.identity(r.Context()), TLS: c.cfg.TLS,
		CSRF: c.csrfToken(r.Context()), Flash: flash(r.URL.Query().Get("done")), Error: perr, Data: data}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	w.WriteHeader(httpStatus)
	if err := t.ExecuteTemplate(w, "layout.html", v); err != nil {
		c.cfg.Logger.Warn("console: rendering failed", "page", page, "err", err)
	}
}

// fail renders a page that is only an error.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, httpStatus int, msg string) {
	c.render(w, r, httpStatus, "error", "Error", nil, &pageError{Message: msg})
}

// failErr renders a call's error with the API's status.
func (c *Console) failErr(w http.ResponseWriter, r *http.Request, err error) {
	perr, code := c.explain(r.Context(), err)
	c.render(w, r, c.cfg.HTTPStatus(code), "error", "Error", nil, perr)
}

// explain turns a call's error into a banner and its code.
func (c *Console) explain(ctx context.Context, err error) (*pageError, codes.Code) {
	if errors.Is(err, context.Canceled) {
		return &pageError{Code: "CANCELLED", Message: "the request was cancelled"}, codes.Canceled
	}
	st, _ := status.FromError(err)
	pe := &pageError{Code: st.Code().String(), Reason: coorderr.WireReason(err), Message: st.Message()}
	switch st.Code() {
	case codes.PermissionDenied:
		id := c.identity(ctx)
		pe.Hint = fmt.Sprintf("Your identity %q is read-only here: the ACL decides what it may do (actions need the job op on the queue). Ask an operator, or use an identity the ACL allows.", id)
	case codes.Unauthenticated:
		pe.Hint = "The console needs a client certificate signed by the cluster's CA, as the HTTP API does."
	case codes.Unavailable:
		pe.Hint = "The cluster has no leader right now, or this node cannot reach it. Reload in a moment."
	}
	return pe, st.Code()
}

func flash(done string) string {
	switch done {
	case "cancel":
		return "Job cancelled."
	case "retry":
		return "Job retried: it is available now."
	case "pause":
		return "Schedule paused."
	case "resume":
		return "Schedule resumed."
	case "bulk-retry", "bulk-cancel", "bulk-delete":
		return "Bulk " + strings.TrimPrefix(done, "bulk-") + " started: the leader applies it in batches; its progress is below."
	case "queue-pause":
		return "Queue paused: fetches hand out none of its jobs until it is resumed."
	case "queue-resume":
		return "Queue resumed."
	case "trigger":
		return "Schedule triggered: an extra occurrence was made now."
	}
	return ""
}
