package api

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// gRPC reflection serves the protos with their comments (grpcurl describe
// shows them), and still describes the services the set lacks (health).
func TestReflectionServesComments(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coordv1.RegisterCoordinatorServer(srv, coordv1.UnimplementedCoordinatorServer{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	registerReflection(srv)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionv1.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	file := func(symbol string) *descriptorpb.FileDescriptorProto {
		t.Helper()
		if err := stream.Send(&reflectionv1.ServerReflectionRequest{
			MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		fds := resp.GetFileDescriptorResponse().GetFileDescriptorProto()
		if len(fds) == 0 {
			t.Fatalf("%s: %v", symbol, resp)
		}
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(fds[0], &fd); err != nil {
			t.Fatal(err)
		}
		return &fd
	}
	fd := file("coord.v1.Coordinator")
	found := false
	for _, loc := range fd.GetSourceCodeInfo().GetLocation() {
		found = found || strings.Contains(loc.GetLeadingComments(), "Acquire takes the lease")
	}
	if fd.GetName() != "coord/v1/coord.proto" || !found {
		t.Fatalf("%s: no comment of Acquire in its %d locations", fd.GetName(), len(fd.GetSourceCodeInfo().GetLocation()))
	}
	if fd := file("grpc.health.v1.Health"); fd.GetPackage() != "grpc.health.v1" {
		t.Fatalf("health: %v", fd.GetName())
	}
}
