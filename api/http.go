package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/coordd/coordd/coorderr"
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
		r.Body = http.MaxBytesReader(w, r.Body, MaxMessageBytes)
		gw.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), httpIdentityKey{}, tlsutil.PeerOf(r.TLS))))
	})
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

func writeHTTPError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	st := status.Convert(err)
	body := HTTPError{Code: codeName(st.Code()), Message: st.Message(),
		Reason: coorderr.WireReason(err), Metadata: coorderr.Metadata(err)}
	httpStatus := HTTPStatus(st.Code())
	// The gateway's own errors (an unparsable body, an unknown route) carry
	// no ErrorInfo; give bad input its reason all the same.
	if body.Reason == "" && st.Code() == codes.InvalidArgument {
		body.Reason = coorderr.Name(coorderr.InvalidArgument)
	}
	w.Header().Set("Content-Type", "application/json")
	if st.Code() == codes.Unavailable {
		w.Header().Set("Retry-After", "1")
		if addr := body.Metadata["leader_address"]; addr != "" {
			w.Header().Set("Coordd-Leader", addr)
		}
	}
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
