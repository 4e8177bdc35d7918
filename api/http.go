package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/api/openapi"
	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/proto/coord/v1/coordv1gw"
)

// The HTTP/JSON API (grpc-gateway, mapping in proto/coord/v1/coord_http.yaml)
// serves every call but KeepAlive and the cluster's administration
// (leases, windows, fenced commits, the queue and its workers, schedules,
// the cluster's status and members, Watch as newline-delimited JSON) for
// APIs in any language, with the same validation, authorization and errors
// as gRPC, and its OpenAPI document at /v1/openapi.json (api/openapi).
// docs/http-api.md documents it.

// httpIdentityKey carries an HTTP request's verified certificate
// (tlsutil.Peer; the zero Peer without one).
type httpIdentityKey struct{}

func httpPeer(ctx context.Context) tlsutil.Peer {
	p, _ := ctx.Value(httpIdentityKey{}).(tlsutil.Peer)
	return p
}

// httpAPI is the handler of /v1/.
func (s *Server) httpAPI() http.Handler {
	gw := runtime.NewServeMux(
		runtime.WithErrorHandler(writeHTTPError),
		runtime.WithRoutingErrorHandler(routingError),
		runtime.WithMiddlewares(probeRoute, s.httpMetrics.middleware), // a probe is not a call
		runtime.WithForwardResponseOption(singleItemError),
		// One method a route: no POST of a form read as its GET.
		runtime.WithDisablePathLengthFallback(),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, newHTTPJSON()),
		runtime.SetQueryParameterParser(&httpQuery{}),
	)
	// The generated code calls this node's services through the in-process
	// connection (inproc.go): the guard the gRPC interceptor applies, then
	// the service. Only the calls coord_http.yaml maps are routed.
	ctx, conn := context.Background(), s.inprocConn()
	if err := errors.Join(
		coordv1gw.RegisterCoordinatorHandlerClient(ctx, gw, coordv1.NewCoordinatorClient(conn)),
		coordv1gw.RegisterQueueHandlerClient(ctx, gw, coordv1.NewQueueClient(conn)),
		coordv1gw.RegisterSchedulesHandlerClient(ctx, gw, coordv1.NewSchedulesClient(conn)),
		coordv1gw.RegisterClusterHandlerClient(ctx, gw, coordv1.NewClusterClient(conn)),
		coordv1gw.RegisterWatchHandlerClient(ctx, gw, coordv1.NewWatchClient(conn)),
		gw.HandlePath(http.MethodGet, openapi.Path, func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
			openapi.Handler().ServeHTTP(w, r)
		}),
	); err != nil {
		panic(err) // registration of generated patterns cannot fail
	}
	// A call answers within the write timeout (after which the connection
	// is cut): a waiting Acquire without its own Grpc-Timeout ends a second
	// (or a tenth of the timeout) before it with DEADLINE_EXCEEDED. A
	// watch's stream instead gets the write timeout for each line and no
	// deadline while quiet.
	bound := s.cfg.HTTPWriteTimeout - min(time.Second, s.cfg.HTTPWriteTimeout/10)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), httpIdentityKey{}, tlsutil.PeerOf(r.TLS))
		if r.URL.Path == watchPath {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
			w = &streamWriter{ResponseWriter: w, timeout: s.cfg.HTTPWriteTimeout}
		} else if bound > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, bound)
			defer cancel()
		}
		gw.ServeHTTP(w, r.WithContext(ctx))
	})
}

// watchPath is the route of Watch (coord_http.yaml).
const watchPath = "/v1/watch"

// streamWriter bounds each line of a stream (its writes, up to the flush
// that ends it) by the write timeout, and leaves the stream without a
// deadline while it is quiet (the gateway flushes after each message).
type streamWriter struct {
	http.ResponseWriter
	timeout time.Duration
}

func (w *streamWriter) Write(p []byte) (int, error) {
	if w.timeout > 0 {
		_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(w.timeout))
	}
	return w.ResponseWriter.Write(p)
}

func (w *streamWriter) Flush() {
	rc := http.NewResponseController(w.ResponseWriter)
	if err := rc.Flush(); err == nil && w.timeout > 0 {
		_ = rc.SetWriteDeadline(time.Time{})
	}
}

func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// probeKey marks a request that only asks whether a route matches
// (allowedMethods); its *bool is set when one does.
type probeKey struct{}

// probeRoute is the gateway's middleware: a probe's match is noted and
// served no further.
func probeRoute(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		if matched, ok := r.Context().Value(probeKey{}).(*bool); ok {
			*matched = true
			return
		}
		next(w, r, params)
	}
}

// routeMethods are the methods a route may have (coord_http.yaml uses
// GET, POST and DELETE).
var routeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods are the methods with a route for r's path: each asked of
// the gateway's own matcher with a probe (nothing is served).
func allowedMethods(mux *runtime.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range routeMethods {
		matched := false
		probe := r.Clone(context.WithValue(r.Context(), probeKey{}, &matched))
		probe.Method, probe.Body = m, http.NoBody
		mux.ServeHTTP(discardWriter{}, probe)
		if matched {
			allow = append(allow, m)
		}
	}
	return allow
}

// discardWriter is the answer a probe writes to.
type discardWriter struct{}

func (discardWriter) Header() http.Header         { return http.Header{} }
func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (discardWriter) WriteHeader(int)             {}

// routingError answers a request no route serves: 404 NOT_FOUND for an
// unknown path, 405 with Allow for a path served with other methods.
func routingError(ctx context.Context, mux *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	if _, probing := ctx.Value(probeKey{}).(*bool); probing {
		return
	}
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		allow := strings.Join(allowedMethods(mux, r), ", ")
		w.Header().Set("Allow", allow)
		writeHTTPBody(w, httpStatus, HTTPError{Code: codeName(codes.InvalidArgument),
			Message:  fmt.Sprintf("%s is not served for %s; it serves %s", r.Method, r.URL.Path, allow),
			Reason:   coorderr.Name(coorderr.InvalidArgument),
			Metadata: map[string]string{"field": "method", "allow": allow}})
	case http.StatusNotFound:
		writeHTTPBody(w, httpStatus, HTTPError{Code: codeName(codes.NotFound),
			Message:  fmt.Sprintf("no route %s; %s lists every route", r.URL.Path, openapi.Path),
			Reason:   coorderr.Name(coorderr.NotFound),
			Metadata: map[string]string{"path": r.URL.Path}})
	default:
		writeHTTPBody(w, httpStatus, HTTPError{Code: codeName(codes.InvalidArgument),
			Message: http.StatusText(httpStatus), Reason: coorderr.Name(coorderr.InvalidArgument),
			Metadata: map[string]string{"field": "path"}})
	}
}

// singleItemError answers a worker call of one item (Heartbeat, Complete,
// Fail) that the item's refusal refused with that refusal as the HTTP
// status and error body, as a call of that one thing would: the batch's
// 200 with results[i].error is for batches of two or more.
func singleItemError(_ context.Context, _ http.ResponseWriter, resp proto.Message) error {
	var item *coordv1.JobItemError
	switch r := resp.(type) {
	case *coordv1.QueueHeartbeatResponse:
		if len(r.GetResults()) == 1 {
			item = r.GetResults()[0].GetError()
		}
	case *coordv1.QueueCompleteResponse:
		if len(r.GetResults()) == 1 {
			item = r.GetResults()[0].GetError()
		}
	case *coordv1.QueueFailResponse:
		if len(r.GetResults()) == 1 {
			item = r.GetResults()[0].GetError()
		}
	}
	if item == nil {
		return nil
	}
	reason, _ := coorderr.ParseReason(item.GetReason())
	return toStatus(&fsm.Rejection{Reason: reason, Message: item.GetMessage(), Metadata: item.GetMetadata()})
}

// bodyLimitKey is the context key of a request's *atomic.Bool that says
// its body went over MaxMessageBytes (limitBodies).
type bodyLimitKey struct{}

// limitBodies caps every request body of the HTTP port at MaxMessageBytes
// (as a gRPC message): a declared Content-Length over it is refused at once
// with 413; a longer body fails its read, and writeHTTPError answers 413
// too. How long the body may take is the server's ReadTimeout.
func limitBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxMessageBytes {
			writeTooLarge(w)
			return
		}
		over := new(atomic.Bool)
		r.Body = &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, MaxMessageBytes), over: over}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyLimitKey{}, over)))
	})
}

// limitedBody notes when its MaxBytesReader refuses to read on.
type limitedBody struct {
	io.ReadCloser
	over *atomic.Bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		b.over.Store(true)
	}
	return n, err
}

// writeTooLarge answers 413 for a body over MaxMessageBytes.
func writeTooLarge(w http.ResponseWriter) {
	writeHTTPBody(w, http.StatusRequestEntityTooLarge, HTTPError{Code: codeName(codes.InvalidArgument),
		Message:  fmt.Sprintf("the request body is over the limit of %d bytes", MaxMessageBytes),
		Reason:   coorderr.Name(coorderr.InvalidArgument),
		Metadata: map[string]string{"field": "body", "limit_bytes": strconv.Itoa(MaxMessageBytes)}})
}

// requireIdentity serves h, with TLS on, only to a caller with a verified
// client certificate (else 401) whose identity allowed accepts (else 403);
// what names the endpoint in the refusal. With TLS off, h as it is.
func (s *Server) requireIdentity(what string, allowed func(c auth.Caller) bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.authEnabled() {
			var p tlsutil.Peer
			if r.TLS != nil {
				p = tlsutil.PeerOf(r.TLS)
			}
			c, _ := auth.Authenticate(p, nil, s.node.IsMember)
			id := c.Identity
			var err error
			switch {
			case id == "":
				err = &auth.Error{Kind: auth.Unauthenticated, Msg: what + " needs a client certificate signed by the cluster's CA"}
			case !allowed(c):
				err = &auth.Error{Kind: auth.PermissionDenied, Msg: fmt.Sprintf("identity %q may not see %s", id, what),
					Meta: map[string]string{"identity": id}}
			}
			if err != nil {
				writeHTTPError(r.Context(), nil, nil, w, r, toStatus(err))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// mayScrape: /metrics name every tenant's queues, so a scrape needs what a
// read of everything needs (or admin, or membership).
func (s *Server) mayScrape(c auth.Caller) bool {
	return c.Member || s.adminAllowed(c) || s.authorize(c, auth.OpRead, "", true) == nil
}

// mayAdminister: pprof's dumps show every caller's calls; members and
// identities allowed admin only.
func (s *Server) mayAdminister(c auth.Caller) bool {
	return c.Member || s.authorize(c, auth.OpAdmin, "", false) == nil
}

// HTTPError is the JSON body of every HTTP API error.
type HTTPError struct {
	// Code is the gRPC code name (FAILED_PRECONDITION, ...).
	Code     string            `json:"code"`
	Message  string            `json:"message"`
	Reason   string            `json:"reason,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// httpStatuses is the HTTP API's status for a gRPC code: a token that is
// not current (or any other refused fence) is 409, a denial 403, bad input
// 400, no leader 503. Any other code is 500.
var httpStatuses = map[codes.Code]int{
	codes.OK:                 http.StatusOK,
	codes.InvalidArgument:    http.StatusBadRequest,
	codes.OutOfRange:         http.StatusBadRequest,
	codes.Unauthenticated:    http.StatusUnauthorized,
	codes.PermissionDenied:   http.StatusForbidden,
	codes.NotFound:           http.StatusNotFound,
	codes.FailedPrecondition: http.StatusConflict,
	codes.Aborted:            http.StatusConflict,
	codes.AlreadyExists:      http.StatusConflict,
	codes.ResourceExhausted:  http.StatusTooManyRequests,
	codes.Unavailable:        http.StatusServiceUnavailable,
	codes.DeadlineExceeded:   http.StatusGatewayTimeout,
	codes.Canceled:           499, // client closed request
	codes.Unimplemented:      http.StatusNotImplemented,
}

// HTTPStatus maps a gRPC status to the HTTP API's status (httpStatuses).
func HTTPStatus(code codes.Code) int {
	if st, ok := httpStatuses[code]; ok {
		return st
	}
	return http.StatusInternalServerError
}

func writeHTTPError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if over, _ := r.Context().Value(bodyLimitKey{}).(*atomic.Bool); over != nil && over.Load() {
		writeTooLarge(w) // the gateway's read of the body failed at the limit
		return
	}
	// A status wrapped by the gateway (a forward-response hook's) is
	// answered as it is.
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		err = se.(error)
	}
	st := status.Convert(err)
	body := HTTPError{Code: codeName(st.Code()), Message: st.Message(),
		Reason: coorderr.WireReason(err), Metadata: coorderr.Metadata(err)}
	httpStatus := HTTPStatus(st.Code())
	// The gateway's own errors (an unparsable body, an unknown route) carry
	// no ErrorInfo; give bad input its reason all the same.
	if body.Reason == "" && st.Code() == codes.InvalidArgument {
		body.Reason = coorderr.Name(coorderr.InvalidArgument)
	}
	if st.Code() == codes.Unavailable {
		w.Header().Set("Retry-After", "1")
		if addr := body.Metadata["leader_address"]; addr != "" {
			w.Header().Set("Coordd-Leader", addr)
		}
	}
	writeHTTPBody(w, httpStatus, body)
}

// writeHTTPBody writes an error body with its status.
func writeHTTPBody(w http.ResponseWriter, httpStatus int, body HTTPError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_ = json.NewEncoder(w).Encode(body)
}

// codeName is the canonical upper-case name of a gRPC code (google.rpc.Code).
func codeName(c codes.Code) string {
	if name, ok := code.Code_name[int32(c)]; ok {
		return name
	}
	return code.Code_UNKNOWN.String()
}
