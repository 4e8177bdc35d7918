package backup

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/proto"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// SnapshotFormat is the fsm snapshot encoding this package reads: the
// digit of "coordd-snapshot-v1". It equals fsm.SnapshotFormat (a test in
// cmd/coordd checks); this package cannot import fsm, as coordctl, which
// uses it, is built on the SDK only (internal/layering).
const SnapshotFormat = 1

const snapshotHeader = "coordd-snapshot-v1\n"

// maxRecord bounds one record, as fsm does.
const maxRecord = 16 << 20

// Counts is what a snapshot holds, counted record by record.
type Counts struct {
	// LeaseTimeMs and CalendarMs are the two clocks as of the snapshot.
	LeaseTimeMs int64 `json:"lease_time_ms"`
	CalendarMs  int64 `json:"calendar_ms"`
	Leases      int   `json:"leases"`
	// LiveLeases are held: not released and not expired at LeaseTimeMs.
	LiveLeases int `json:"live_leases"`
	// MaxGeneration is the highest lease generation.
	MaxGeneration    uint64         `json:"max_generation"`
	Windows          int            `json:"windows"`
	CompletedWindows int            `json:"completed_windows"`
	Resources        int            `json:"resources"`
	Idempotency      int            `json:"idempotency_records"`
	Jobs             int            `json:"jobs"`
	JobsByState      map[string]int `json:"jobs_by_state"`
	LastJobID        uint64         `json:"last_job_id"`
	Schedules        int            `json:"schedules"`
	QueueTargets     int            `json:"queue_targets"`
	Members          int            `json:"members"`
}

// Count reads a snapshot (the bytes after a backup's header) and counts
// its records. Every record is decoded; the meta record's counts must
// match what follows. It does not run the state machine's own checks
// (coordd restore does, before it writes anything).
func Count(r io.Reader) (*Counts, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	hdr := make([]byte, len(snapshotHeader))
	if _, err := io.ReadFull(br, hdr); err != nil {
		return nil, fmt.Errorf("snapshot header: %w", err)
	}
	if string(hdr) != snapshotHeader {
		if strings.HasPrefix(string(hdr), "coordd-snapshot-v") {
			return nil, fmt.Errorf("snapshot format %q is not the one this build reads (%q)", strings.TrimSpace(string(hdr)), strings.TrimSpace(snapshotHeader))
		}
		return nil, fmt.Errorf("not a coordd snapshot (header %q)", hdr)
	}
	c := &Counts{JobsByState: map[string]int{}}
	var (
		meta *fsmv1.SnapshotMeta
		buf  []byte
	)
	for {
		n, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("snapshot record length: %w", err)
		}
		if n > maxRecord {
			return nil, fmt.Errorf("snapshot record of %d bytes exceeds the limit", n)
		}
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, fmt.Errorf("snapshot record: %w", err)
		}
		rec := &fsmv1.SnapshotRecord{}
		if err := proto.Unmarshal(buf, rec); err != nil {
			return nil, fmt.Errorf("snapshot record: %w", err)
		}
		switch x := rec.GetRecord().(type) {
		case *fsmv1.SnapshotRecord_Meta:
			meta = x.Meta
			c.LeaseTimeMs, c.CalendarMs, c.LastJobID = meta.GetClockMs(), meta.GetCalendarMs(), meta.GetLastJobId()
		case *fsmv1.SnapshotRecord_Lease:
			c.Leases++
			c.MaxGeneration = max(c.MaxGeneration, x.Lease.GetGeneration())
			if !x.Lease.GetReleased() && x.Lease.GetExpiresAtMs() > c.LeaseTimeMs {
				c.LiveLeases++
			}
		case *fsmv1.SnapshotRecord_Window:
			c.Windows++
			if x.Window.GetCompleted() {
				c.CompletedWindows++
			}
		case *fsmv1.SnapshotRecord_Resource:
			c.Resources++
		case *fsmv1.SnapshotRecord_Idempotency:
			c.Idempotency++
		case *fsmv1.SnapshotRecord_Member:
			c.Members++
		case *fsmv1.SnapshotRecord_Job: // the retired job registry
		case *fsmv1.SnapshotRecord_QueueJob:
			c.Jobs++
			c.JobsByState[strings.TrimPrefix(x.QueueJob.GetState().String(), "JOB_STATE_")]++
		case *fsmv1.SnapshotRecord_Schedule:
			c.Schedules++
		case *fsmv1.SnapshotRecord_QueueTarget:
			c.QueueTargets++
		default:
			return nil, errors.New("snapshot: a record of a type this build does not know")
		}
		if meta == nil {
			return nil, errors.New("snapshot: the first record is not the meta record")
		}
	}
	if meta == nil {
		return nil, errors.New("snapshot: no meta record")
	}
	for _, m := range []struct {
		what      string
		meta, got int
	}{{"leases", int(meta.GetLeases()), c.Leases}, {"windows", int(meta.GetWindows()), c.Windows},
		{"resources", int(meta.GetResources()), c.Resources}, {"jobs", int(meta.GetQueueJobs()), c.Jobs},
		{"schedules", int(meta.GetSchedules()), c.Schedules}, {"members", int(meta.GetMembers()), c.Members}} {
		if m.meta != m.got {
			return nil, fmt.Errorf("snapshot: the meta record counts %d %s, the snapshot holds %d", m.meta, m.what, m.got)
		}
	}
	return c, nil
}
