package api

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/coordd/coordd/node/leader"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// advertiseNode records the gRPC address Serve advertises.
type advertiseNode struct {
	*fakeNode
	got chan string
}

func (a advertiseNode) Advertise(addr string, _ func(context.Context, string, *coordv1.AddVoterRequest) error) {
	a.got <- addr
}

func (a advertiseNode) RegisterLeaderServices(...leader.Service) {}

// Serve advertises GRPCAdvertise as given (a name), or the bound address
// when it is unset; an advertise address no one could dial is refused,
// named.
func TestServeAdvertisesGRPCAddress(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, adv := range []string{"", "coordd-0.coordd-peer:7400"} {
		n := advertiseNode{newFakeNode(), make(chan string, 1)}
		s, err := Serve(Config{GRPCAddr: "127.0.0.1:0", GRPCAdvertise: adv, Logger: log}, n)
		if err != nil {
			t.Fatal(err)
		}
		want := adv
		if want == "" {
			want = s.GRPCAddr()
		}
		if got := <-n.got; got != want || s.AdvertisedGRPCAddr() != want {
			t.Errorf("advertise %q: advertised %q (%q), want %q", adv, got, s.AdvertisedGRPCAddr(), want)
		}
		s.Close()
	}
	for _, bad := range []string{"0.0.0.0:7400", "coordd-0", "coordd-0:0"} {
		_, err := Serve(Config{GRPCAddr: "127.0.0.1:0", GRPCAdvertise: bad, Logger: log}, nil)
		if err == nil || !strings.Contains(err.Error(), "grpc advertise address") || !strings.Contains(err.Error(), bad) {
			t.Errorf("advertise %q: want a refusal naming it, got %v", bad, err)
		}
	}
}
