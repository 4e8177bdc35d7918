package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/internal/tlsutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/proto/coord/v1/coordv1gw"
)

// The HTTP/JSON API (grpc-gateway, mapping in proto/coord/v1/coord_http.yaml)
// serves FencedCommit, GetLease and GetResource, the queue's Submit, Get,
// List, Cancel, Retry and Stats, and the Schedules service for APIs in any
// language, with the same validation, authorization and errors as gRPC.
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
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
	)
	// The generated code calls this node's services through the in-process
	// connection (inproc.go): the guard the gRPC interceptor applies, then
	// the service. Only the calls coord_http.yaml maps are routed.
	ctx, conn := context.Background(), s.inprocConn()
	if err := errors.Join(
		coordv1gw.RegisterCoordinatorHandlerClient(ctx, gw, coordv1.NewCoordinatorClient(conn)),
		coordv1gw.RegisterQueueHandlerClient(ctx, gw, coordv1.NewQueueClient(conn)),
		coordv1gw.RegisterSchedulesHandlerClient(ctx, gw, coordv1.NewSchedulesClient(conn)),
	); err != nil {
		panic(err) // registration of generated patterns cannot fail
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gw.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), httpIdentityKey{}, tlsutil.PeerOf(r.TLS))))
	})
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
