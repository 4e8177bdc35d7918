package api

import (
	"context"
	"encoding/base64"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/fsm"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Reads are linearizable by default: they run on the leader, which reads
// its FSM after a VerifyLeader round (node.Read). With stale set, any node
// answers from its own FSM, at its applied clock.

// readOn is stateRead for the Coordinator: a read that is not stale first
// waits briefly for a leader during an election (awaitLeader).
func readOn[Req interface{ GetStale() bool }, Resp any](s *Server, ctx context.Context,
	call func(coordv1.CoordinatorClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
	answer func(st *fsm.FSM, now int64) (Resp, error)) (Resp, error) {
	if !req.GetStale() {
		s.awaitLeader(ctx)
	}
	return stateRead(s, ctx, coordv1.NewCoordinatorClient, call, req, answer)
}

func (c *coordinator) GetLease(ctx context.Context, req *coordv1.GetLeaseRequest) (*coordv1.GetLeaseResponse, error) {
	if err := checkName("name", req.GetName(), true); err != nil {
		return nil, toStatus(err)
	}
	return readOn(c.s, ctx, coordv1.CoordinatorClient.GetLease, req, func(st *fsm.FSM, now int64) (*coordv1.GetLeaseResponse, error) {
		l, _, ok := st.Lease(req.GetName())
		if !ok {
			return nil, &notFoundError{what: "lease " + req.GetName()}
		}
		return &coordv1.GetLeaseResponse{Lease: leaseToProto(l, c.s.stampAt(now))}, nil
	})
}

func (c *coordinator) ListLeases(ctx context.Context, req *coordv1.ListLeasesRequest) (*coordv1.ListLeasesResponse, error) {
	size, err := pageSize(req.GetPageSize())
	if err == nil {
		err = checkName("prefix", req.GetPrefix(), false)
	}
	after, terr := decodePageToken(req.GetPageToken())
	if err = firstErr(err, terr); err != nil {
		return nil, toStatus(err)
	}
	return readOn(c.s, ctx, coordv1.CoordinatorClient.ListLeases, req, func(st *fsm.FSM, now int64) (*coordv1.ListLeasesResponse, error) {
		leases, more := st.Leases(req.GetPrefix(), after, size)
		out := &coordv1.ListLeasesResponse{Leases: make([]*coordv1.Lease, len(leases))}
		for i, l := range leases {
			out.Leases[i] = leaseToProto(l, c.s.stampAt(now))
		}
		if more {
			out.NextPageToken = encodePageToken(leases[len(leases)-1].Name)
		}
		return out, nil
	})
}

func (c *coordinator) GetWindow(ctx context.Context, req *coordv1.GetWindowRequest) (*coordv1.GetWindowResponse, error) {
	if err := firstErr(checkName("job", req.GetJob(), true), checkName("window", req.GetWindow(), true)); err != nil {
		return nil, toStatus(err)
	}
	return readOn(c.s, ctx, coordv1.CoordinatorClient.GetWindow, req, func(st *fsm.FSM, _ int64) (*coordv1.GetWindowResponse, error) {
		w, ok := st.Window(req.GetJob(), req.GetWindow())
		if !ok {
			return nil, &notFoundError{what: "window " + req.GetJob() + "/" + req.GetWindow()}
		}
		return &coordv1.GetWindowResponse{Window: windowToProto(w)}, nil
	})
}

func (c *coordinator) ListWindows(ctx context.Context, req *coordv1.ListWindowsRequest) (*coordv1.ListWindowsResponse, error) {
	size, err := pageSize(req.GetPageSize())
	after, terr := decodePageToken(req.GetPageToken())
	if err = firstErr(err, terr, checkName("job", req.GetJob(), true)); err != nil {
		return nil, toStatus(err)
	}
	return readOn(c.s, ctx, coordv1.CoordinatorClient.ListWindows, req, func(st *fsm.FSM, _ int64) (*coordv1.ListWindowsResponse, error) {
		ws, more := st.Windows(req.GetJob(), after, size)
		out := &coordv1.ListWindowsResponse{Windows: make([]*coordv1.Window, len(ws))}
		for i, w := range ws {
			out.Windows[i] = windowToProto(w)
		}
		if more {
			out.NextPageToken = encodePageToken(ws[len(ws)-1].Window)
		}
		return out, nil
	})
}

func (c *coordinator) GetResource(ctx context.Context, req *coordv1.GetResourceRequest) (*coordv1.GetResourceResponse, error) {
	if err := checkName("resource", req.GetResource(), true); err != nil {
		return nil, toStatus(err)
	}
	return readOn(c.s, ctx, coordv1.CoordinatorClient.GetResource, req, func(st *fsm.FSM, now int64) (*coordv1.GetResourceResponse, error) {
		r, ok := st.Resource(req.GetResource())
		if !ok {
			return nil, &notFoundError{what: "resource " + req.GetResource()}
		}
		return &coordv1.GetResourceResponse{Resource: resourceToProto(r, c.s.stampAt(now))}, nil
	})
}

// Page tokens are the last key of the previous page, opaque to clients.
func encodePageToken(last string) string { return base64.RawURLEncoding.EncodeToString([]byte(last)) }

func decodePageToken(tok string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) > MaxNameBytes {
		return "", invalidArg("page_token", "is not a token this server issued")
	}
	return string(b), nil
}
