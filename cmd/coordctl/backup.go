package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/backup"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// snapshotSaveCmd is "snapshot save FILE": the leader's snapshot, to a
// backup file (internal/backup) written atomically and read back.
func (a *app) snapshotSaveCmd() *cobra.Command {
	var maxTime time.Duration
	cmd := &cobra.Command{Use: "save FILE", Short: "Save a consistent snapshot of the whole state from the leader to FILE (admin)",
		Long: `Streams a consistent snapshot from the leader into FILE: a header (the
snapshot's Raft index and term, format versions, membership, size and
SHA-256) and the snapshot. FILE is written under a temporary name, checked
against the leader's SHA-256, renamed into place and read back; an existing
FILE is replaced only by a complete, verified backup. coordd restore seeds a
new cluster from it (docs/backup-and-upgrade.md).`,
		Example: "  coordctl snapshot save /var/backups/coordd/$(date -u +%Y%m%dT%H%M%SZ).snap",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), maxTime)
			defer cancel()
			return a.saveSnapshot(ctx, args[0])
		}}
	cmd.Flags().DurationVar(&maxTime, "max-time", 30*time.Minute, "how long the whole transfer may take (--timeout bounds finding the leader)")
	return cmd
}

func (a *app) saveSnapshot(ctx context.Context, path string) error {
	began := time.Now()
	var (
		h   *backup.Header
		err error
	)
	// The stream goes to the node the client believes leads; a Members
	// call (unary: routed and redirected) teaches it the leader first, and
	// again after a NOT_LEADER.
	for try := 0; try < 3; try++ {
		lctx, cancel := context.WithTimeout(ctx, a.timeout)
		_, merr := a.cluster().Members(lctx, &coordv1.MembersRequest{})
		cancel()
		if merr != nil {
			return fail("snapshot save", merr)
		}
		h, err = a.streamSnapshot(ctx, path)
		if err == nil || coorderr.ReasonOf(err) != coorderr.NotLeader {
			break
		}
	}
	if err != nil {
		return fail("snapshot save", err)
	}
	took := time.Since(began)
	if a.output == "json" {
		return json.NewEncoder(a.out).Encode(h)
	}
	fmt.Fprintf(a.out, "saved %s: index %d, term %d, %d bytes, sha256 %s, from %s in %s (verified)\n",
		path, h.Index, h.Term, h.Size, h.SHA256, h.NodeID, took.Round(time.Millisecond))
	return nil
}

func (a *app) streamSnapshot(ctx context.Context, path string) (*backup.Header, error) {
	stream, err := a.cluster().SaveSnapshot(ctx, &coordv1.SaveSnapshotRequest{})
	if err != nil {
		return nil, err
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	info := first.GetInfo()
	if info == nil {
		return nil, errors.New("the node's answer did not start with the snapshot's description")
	}
	w, err := backup.Create(path)
	if err != nil {
		return nil, err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			w.Abort()
			if errors.Is(err, io.EOF) {
				return nil, errors.New("the stream ended before the snapshot's checksum (the leader stopped?): nothing was written")
			}
			return nil, err
		}
		if c := m.GetChunk(); c != nil {
			if _, err := w.Write(c); err != nil {
				w.Abort()
				return nil, err
			}
			continue
		}
		t := m.GetTrailer()
		if t == nil {
			w.Abort()
			return nil, errors.New("unexpected message in the snapshot stream")
		}
		hdr := backup.Header{SnapshotFormat: int(info.GetSnapshotFormat()), Index: info.GetIndex(), Term: info.GetTerm(),
			NodeID: info.GetNodeId(), TakenAt: info.GetTakenAt().AsTime().UTC(), CoorddVersion: info.GetVersion()}
		for _, m := range info.GetMembers() {
			hdr.Members = append(hdr.Members, backup.Member{ID: m.GetId(), RaftAddress: m.GetRaftAddress(),
				GRPCAddress: m.GetGrpcAddress(), Suffrage: m.GetSuffrage()})
		}
		return w.Commit(hdr, t.GetSize(), t.GetSha256())
	}
}

// inspection is what snapshot inspect prints as JSON.
type inspection struct {
	Header *backup.Header `json:"header"`
	Counts *backup.Counts `json:"counts"`
}

func (a *app) snapshotInspectCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "inspect FILE", Short: "Check a backup file (its checksum, every record) and print its header and counts",
		Example: "  coordctl snapshot inspect backup.snap", Args: cobra.ExactArgs(1),
		Annotations: map[string]string{offline: "true"},
		RunE: func(_ *cobra.Command, args []string) error {
			h, body, err := backup.Open(args[0])
			if err != nil {
				return err
			}
			defer body.Close()
			if h.SnapshotFormat > backup.SnapshotFormat {
				return fmt.Errorf("%s: snapshot format %d is newer than this coordctl reads (%d)", args[0], h.SnapshotFormat, backup.SnapshotFormat)
			}
			sum, err := backup.Count(body)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if a.output == "json" {
				return json.NewEncoder(a.out).Encode(inspection{h, sum})
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			var ms []string
			for _, m := range h.Members {
				ms = append(ms, m.ID+"="+m.RaftAddress)
			}
			var states []string
			for s, n := range sum.JobsByState {
				states = append(states, fmt.Sprintf("%s %d", s, n))
			}
			sort.Strings(states)
			for _, row := range [][2]string{
				{"file", args[0]}, {"format", fmt.Sprintf("backup v%d, snapshot v%d", h.Format, h.SnapshotFormat)},
				{"index", fmt.Sprint(h.Index)}, {"term", fmt.Sprint(h.Term)},
				{"saved from", h.NodeID + " (" + orDash(h.CoorddVersion) + ")"}, {"taken at", h.TakenAt.Format(time.RFC3339)},
				{"members", strings.Join(ms, ",")}, {"size", fmt.Sprintf("%d bytes", h.Size)}, {"sha256", h.SHA256 + " (verified)"},
				{"leases", fmt.Sprintf("%d (%d held, highest generation %d)", sum.Leases, sum.LiveLeases, sum.MaxGeneration)},
				{"resources", fmt.Sprint(sum.Resources)},
				{"windows", fmt.Sprintf("%d (%d completed)", sum.Windows, sum.CompletedWindows)},
				{"jobs", fmt.Sprintf("%d (%s), last id %d", sum.Jobs, strings.Join(states, ", "), sum.LastJobID)},
				{"schedules", fmt.Sprint(sum.Schedules)},
				{"idempotency records", fmt.Sprint(sum.Idempotency)},
			} {
				fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
			}
			return tw.Flush()
		}}
	return cmd
}
