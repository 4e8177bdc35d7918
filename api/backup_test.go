package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/auth"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// snapNode answers SaveSnapshot with data (or err).
type snapNode struct {
	*fakeNode
	data []byte
	err  error
}

func (n *snapNode) SaveSnapshot(_ context.Context, start func(*coordv1.SnapshotInfo) error, w io.Writer) error {
	if n.err != nil {
		return n.err
	}
	if err := start(&coordv1.SnapshotInfo{Index: 9, Term: 2, Size: int64(len(n.data))}); err != nil {
		return err
	}
	_, err := io.Copy(w, bytes.NewReader(n.data))
	return err
}

type notLeader struct{}

func (notLeader) Error() string                { return "not the leader" }
func (notLeader) NotLeader() (id, addr string) { return "n2", "10.0.0.2:7400" }

// sentStream records what a handler sends.
type sentStream struct {
	grpc.ServerStream
	sent []*coordv1.SaveSnapshotResponse
}

func (s *sentStream) Context() context.Context { return context.Background() }
func (s *sentStream) Send(m *coordv1.SaveSnapshotResponse) error {
	s.sent = append(s.sent, m)
	return nil
}

// SaveSnapshot streams info, chunks of at most snapshotChunk bytes and a
// trailer with their size and SHA-256; a follower's refusal is NOT_LEADER
// with the leader's address.
func TestSaveSnapshotStream(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), snapshotChunk/4) // 2.5 chunks
	n := &snapNode{fakeNode: newFakeNode(), data: data}
	cfg := Config{GRPCAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.withDefaults()
	cfg.Metrics = prometheus.NewRegistry()
	s := newServer(cfg, n)
	st := &sentStream{}
	if err := (&cluster{s: s}).SaveSnapshot(&coordv1.SaveSnapshotRequest{}, st); err != nil {
		t.Fatal(err)
	}
	if len(st.sent) != 5 || st.sent[0].GetInfo().GetIndex() != 9 {
		t.Fatalf("sent %d messages, first %v", len(st.sent), st.sent[0])
	}
	var got []byte
	for _, m := range st.sent[1:4] {
		if len(m.GetChunk()) > snapshotChunk {
			t.Fatalf("a chunk of %d bytes", len(m.GetChunk()))
		}
		got = append(got, m.GetChunk()...)
	}
	sum := sha256.Sum256(data)
	tr := st.sent[4].GetTrailer()
	if !bytes.Equal(got, data) || tr.GetSize() != int64(len(data)) || tr.GetSha256() != hex.EncodeToString(sum[:]) {
		t.Fatalf("chunks of %d bytes, trailer %v", len(got), tr)
	}

	n.err = notLeader{}
	err := (&cluster{s: s}).SaveSnapshot(&coordv1.SaveSnapshotRequest{}, &sentStream{})
	st2, info := coorderr.Info(err)
	if st2 == nil || st2.Code() != codes.Unavailable || coorderr.ReasonOf(err) != coorderr.NotLeader ||
		info.GetMetadata()["leader_address"] != "10.0.0.2:7400" {
		t.Fatalf("follower: %v", err)
	}
}

// SaveSnapshot hands out the whole state: admin only.
func TestSaveSnapshotIsAdminOnly(t *testing.T) {
	_, s, _ := newQueueTest(t)
	useACL(t, s, `
rules:
  - name: readers
    identities: [reader]
    ops: [read, lease, fence, job, work]
    prefixes: [""]
  - name: operators
    identities: [ops]
    ops: [admin]
`)
	m := coordv1.Cluster_SaveSnapshot_FullMethodName
	if err := s.authorizeMethod(auth.Caller{Identity: "reader"}, m, nil); err == nil {
		t.Error("an identity that may read everything but is not admin may save a snapshot")
	}
	if err := s.authorizeMethod(auth.Caller{Identity: "ops"}, m, nil); err != nil {
		t.Errorf("admin: %v", err)
	}
}
