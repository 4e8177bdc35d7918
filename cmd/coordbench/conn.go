package main

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// dial opens a plaintext gRPC connection to addr (the tool's clusters run
// without TLS).
func dial(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
}

// leaderConn dials the leader's gRPC address, as the first endpoint that
// knows it names it in Cluster.Status.
func leaderConn(ctx context.Context, cfg config, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	for _, ep := range cfg.endpoints {
		cc, err := dial(ep)
		if err != nil {
			return nil, err
		}
		st, err := coordv1.NewClusterClient(cc).Status(ctx, &coordv1.StatusRequest{})
		cc.Close()
		if err != nil || st.GetLeaderAddress() == "" {
			continue
		}
		return dial(st.GetLeaderAddress(), opts...)
	}
	return nil, errors.New("no leader found")
}

// leaderCoord returns a raw Coordinator client on the leader (for renew,
// which the SDK does by itself over keepalive) and a func that closes it.
func leaderCoord(ctx context.Context, cfg config) (coordv1.CoordinatorClient, func(), error) {
	cc, err := leaderConn(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return coordv1.NewCoordinatorClient(cc), func() { cc.Close() }, nil
}

// leaderQueue returns a Queue client on the leader (asking again for up
// to 20 s while the cluster elects one) and a func that closes it.
func leaderQueue(ctx context.Context, cfg config) (coordv1.QueueClient, func(), error) {
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		cc, err := leaderConn(ctx, cfg, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err == nil {
			return coordv1.NewQueueClient(cc), func() { cc.Close() }, nil
		}
		if time.Now().After(deadline) {
			return nil, nil, err
		}
	}
}
