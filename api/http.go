package api

import (
	"context"
	"encoding/json"
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

type httpIdentityKey struct{}

// httpAPI is the handler of /v1/.
func (s *Server) httpAPI() http.Handler {
	gw := runtime.NewServeMux(
		runtime.WithErrorHandler(writeHTTPError),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
	)
	// The generated code calls our server directly (no gRPC hop); the
	// wrapper applies what the gRPC interceptor applies.
	if err := coordv1gw.RegisterCoordinatorHandlerServer(context.Background(), gw, &httpCoordinator{c: &coordinator{s: s}}); err != nil {
		panic(err) // registration of generated patterns cannot fail
	}
	if err := coordv1gw.RegisterQueueHandlerServer(context.Background(), gw, &httpQueue{q: &queue{s: s}}); err != nil {
		panic(err)
	}
	if err := coordv1gw.RegisterSchedulesHandlerServer(context.Background(), gw, &httpSchedules{h: &schedules{s: s}}); err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxMessageBytes)
		var id string
		if r.TLS != nil {
			id = tlsutil.IdentityOf(r.TLS)
		}
		gw.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), httpIdentityKey{}, id)))
	})
}

// httpCoordinator is the part of the Coordinator the gateway exposes.
type httpCoordinator struct {
	coordv1.UnimplementedCoordinatorServer
	c *coordinator
}

func httpGuard[Req, Resp any](s *Server, ctx context.Context, method string, req Req,
	call func(context.Context, Req) (Resp, error)) (Resp, error) {
	id, _ := ctx.Value(httpIdentityKey{}).(string)
	ctx, err := s.guard(ctx, id, false, method, req)
	if err != nil {
		var zero Resp
		return zero, err
	}
	return call(ctx, req)
}

func (h *httpCoordinator) FencedCommit(ctx context.Context, req *coordv1.FencedCommitRequest) (*coordv1.FencedCommitResponse, error) {
	return httpGuard(h.c.s, ctx, coordv1.Coordinator_FencedCommit_FullMethodName, req, h.c.FencedCommit)
}

func (h *httpCoordinator) GetLease(ctx context.Context, req *coordv1.GetLeaseRequest) (*coordv1.GetLeaseResponse, error) {
	return httpGuard(h.c.s, ctx, coordv1.Coordinator_GetLease_FullMethodName, req, h.c.GetLease)
}

func (h *httpCoordinator) GetResource(ctx context.Context, req *coordv1.GetResourceRequest) (*coordv1.GetResourceResponse, error) {
	return httpGuard(h.c.s, ctx, coordv1.Coordinator_GetResource_FullMethodName, req, h.c.GetResource)
}

// httpSchedules is the Schedules service behind the gateway.
type httpSchedules struct {
	coordv1.UnimplementedSchedulesServer
	h *schedules
}

func (x *httpSchedules) PutSchedule(ctx context.Context, req *coordv1.PutScheduleRequest) (*coordv1.PutScheduleResponse, error) {
	return httpGuard(x.h.s, ctx, coordv1.Schedules_PutSchedule_FullMethodName, req, x.h.PutSchedule)
}

func (x *httpSchedules) GetSchedule(ctx context.Context, req *coordv1.GetScheduleRequest) (*coordv1.GetScheduleResponse, error) {
	return httpGuard(x.h.s, ctx, coordv1.Schedules_GetSchedule_FullMethodName, req, x.h.GetSchedule)
}

func (x *httpSchedules) ListSchedules(ctx context.Context, req *coordv1.ListSchedulesRequest) (*coordv1.ListSchedulesResponse, error) {
	return httpGuard(x.h.s, ctx, coordv1.Schedules_ListSchedules_FullMethodName, req, x.h.ListSchedules)
}

func (x *httpSchedules) PauseSchedule(ctx context.Context, req *coordv1.PauseScheduleRequest) (*coordv1.PauseScheduleResponse, error) {
	return httpGuard(x.h.s, ctx, coordv1.Schedules_PauseSchedule_FullMethodName, req, x.h.PauseSchedule)
}

func (x *httpSchedules) ResumeSchedule(ctx context.Context, req *coordv1.ResumeScheduleRequest) (*coordv1.ResumeScheduleResponse, error) {
	return httpGuard(x.h.s, ctx, coordv1.Schedules_ResumeSchedule_FullMethodName, req, x.h.ResumeSchedule)
}

func (x *httpSchedules) TriggerSchedule(ctx context.Context, req *coordv1.TriggerScheduleRequest) (*coordv1.TriggerScheduleResponse, error) {
	return httpGuard(x.h.s, ctx, coordv1.Schedules_TriggerSchedule_FullMethodName, req, x.h.TriggerSchedule)
}

func (x *httpSchedules) DeleteSchedule(ctx context.Context, req *coordv1.DeleteScheduleRequest) (*coordv1.DeleteScheduleResponse, error) {
	return httpGuard(x.h.s, ctx, coordv1.Schedules_DeleteSchedule_FullMethodName, req, x.h.DeleteSchedule)
}

func (x *httpSchedules) ListOverdue(ctx context.Context, req *coordv1.ListOverdueRequest) (*coordv1.ListOverdueResponse, error) {
	return httpGuard(x.h.s, ctx, coordv1.Schedules_ListOverdue_FullMethodName, req, x.h.ListOverdue)
}

// httpQueue is the part of the Queue the gateway exposes: submitting and
// looking up jobs (workers use gRPC).
type httpQueue struct {
	coordv1.UnimplementedQueueServer
	q *queue
}

func (h *httpQueue) Submit(ctx context.Context, req *coordv1.QueueSubmitRequest) (*coordv1.QueueSubmitResponse, error) {
	return httpGuard(h.q.s, ctx, coordv1.Queue_Submit_FullMethodName, req, h.q.Submit)
}

func (h *httpQueue) Get(ctx context.Context, req *coordv1.QueueGetRequest) (*coordv1.QueueGetResponse, error) {
	return httpGuard(h.q.s, ctx, coordv1.Queue_Get_FullMethodName, req, h.q.Get)
}

func (h *httpQueue) List(ctx context.Context, req *coordv1.QueueListRequest) (*coordv1.QueueListResponse, error) {
	return httpGuard(h.q.s, ctx, coordv1.Queue_List_FullMethodName, req, h.q.List)
}

func (h *httpQueue) Cancel(ctx context.Context, req *coordv1.QueueCancelRequest) (*coordv1.QueueCancelResponse, error) {
	return httpGuard(h.q.s, ctx, coordv1.Queue_Cancel_FullMethodName, req, h.q.Cancel)
}

func (h *httpQueue) Retry(ctx context.Context, req *coordv1.QueueRetryRequest) (*coordv1.QueueRetryResponse, error) {
	return httpGuard(h.q.s, ctx, coordv1.Queue_Retry_FullMethodName, req, h.q.Retry)
}

func (h *httpQueue) Stats(ctx context.Context, req *coordv1.QueueStatsRequest) (*coordv1.QueueStatsResponse, error) {
	return httpGuard(h.q.s, ctx, coordv1.Queue_Stats_FullMethodName, req, h.q.Stats)
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
