package integration

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// errInfo returns the code, ErrorInfo reason and metadata of a status error.
func errInfo(err error) (codes.Code, string, map[string]string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info.GetReason(), info.GetMetadata()
		}
	}
	return st.Code(), "", nil
}

func wantErr(t *testing.T, err error, code codes.Code, reason string) map[string]string {
	t.Helper()
	if err == nil {
		t.Fatalf("want %s/%s, got success", code, reason)
	}
	c, r, meta := errInfo(err)
	if c != code || r != reason {
		t.Fatalf("want %s/%s, got %s/%s: %v", code, reason, c, r, err)
	}
	return meta
}

func acquire(t *testing.T, cc coordv1.CoordinatorClient, name, owner string, ttl time.Duration) *coordv1.Lease {
	t.Helper()
	resp, err := cc.Acquire(ctxT(t), &coordv1.AcquireRequest{Name: name, Owner: owner, TtlMs: ttl.Milliseconds()})
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	if !resp.GetAcquired() {
		t.Fatalf("acquire %s by %s: held by %v", name, owner, resp.GetLease())
	}
	return resp.GetLease()
}
