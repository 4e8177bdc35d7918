// Package snapfile is the encoding of coordd's state-machine snapshots: a
// header line naming the format, then records, each a uvarint length and a
// coord.fsm.v1.SnapshotRecord, the meta record first. fsm writes and reads
// it; internal/backup (coordctl, which is built on the SDK and may not
// import fsm) counts a snapshot's records with the same reader, so the two
// cannot drift apart when a record type is added.
package snapfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Format is the version of the encoding this build writes and reads: the
// digit of Header. A node refuses a snapshot of another format
// (FormatError) rather than misread it.
const Format = 1

// Header starts every snapshot.
const Header = "coordd-snapshot-v1\n"

// MaxRecord bounds one record when reading, so a corrupt length cannot
// make a reader allocate without limit.
const MaxRecord = 16 << 20

// FormatError explains a snapshot header this build cannot read: a newer
// format (upgrade coordd) or not a snapshot at all.
func FormatError(hdr []byte) error {
	const prefix = "coordd-snapshot-v"
	s := string(hdr)
	if v, ok := strings.CutPrefix(strings.TrimRight(s, "\n"), prefix); ok {
		if n, err := strconv.Atoi(v); err == nil && n > Format {
			return fmt.Errorf("snapshot: format v%d is newer than this coordd reads (v%d): "+
				"run a coordd release that knows it (docs/backup-and-upgrade.md, \"Version skew\")", n, Format)
		}
	}
	// A short header of a longer version ("coordd-snapshot-v12\n") reads
	// as "coordd-snapshot-v12" without its newline: handled above.
	return fmt.Errorf("snapshot: unknown format %q (this coordd reads %q)", s, Header)
}

// Read checks the header and calls fn with each record in order; fn's
// error stops the read and is returned. The meta record must come first.
func Read(r io.Reader, fn func(*fsmv1.SnapshotRecord) error) error {
	br := bufio.NewReaderSize(r, 256<<10)
	hdr := make([]byte, len(Header))
	if _, err := io.ReadFull(br, hdr); err != nil {
		return fmt.Errorf("snapshot header: %w", err)
	}
	if string(hdr) != Header {
		return FormatError(hdr)
	}
	var buf []byte
	for first := true; ; first = false {
		n, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			if first {
				return errors.New("snapshot: no meta record")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("snapshot record length: %w", err)
		}
		if n > MaxRecord {
			return fmt.Errorf("snapshot record of %d bytes exceeds the limit", n)
		}
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return fmt.Errorf("snapshot record: %w", err)
		}
		rec := &fsmv1.SnapshotRecord{}
		if err := proto.Unmarshal(buf, rec); err != nil {
			return fmt.Errorf("snapshot record: %w", err)
		}
		if _, meta := rec.GetRecord().(*fsmv1.SnapshotRecord_Meta); first != meta {
			if first {
				return errors.New("snapshot: the first record is not the meta record")
			}
			return errors.New("snapshot: a second meta record")
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
}

// Counts is what a snapshot holds.
type Counts struct {
	Format int `json:"format"`
	// LeaseTimeMs and CalendarMs are the two clocks as of the snapshot.
	LeaseTimeMs int64 `json:"lease_time_ms"`
	CalendarMs  int64 `json:"calendar_ms"`
	Leases      int   `json:"leases"`
	// LiveLeases are held (not released, not expired at LeaseTimeMs).
	LiveLeases int `json:"live_leases"`
	// MaxGeneration is the highest lease generation in the snapshot.
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
	PausedQueues     int            `json:"paused_queues"`
	BulkOps          int            `json:"bulk_operations"`
	QueueLimits      int            `json:"queue_limits"`
	Members          int            `json:"members"`
}

// NewCounts is an empty count of a snapshot of this format.
func NewCounts() *Counts { return &Counts{Format: Format, JobsByState: map[string]int{}} }

// Add counts one record (the meta record first: it sets the clocks that
// decide which leases are live). A record type this build does not know
// is an error.
func (c *Counts) Add(rec *fsmv1.SnapshotRecord) error {
	switch x := rec.GetRecord().(type) {
	case *fsmv1.SnapshotRecord_Meta:
		c.LeaseTimeMs, c.CalendarMs, c.LastJobID = x.Meta.GetClockMs(), x.Meta.GetCalendarMs(), x.Meta.GetLastJobId()
	case *fsmv1.SnapshotRecord_Lease:
		c.AddLease(x.Lease.GetGeneration(), !x.Lease.GetReleased() && x.Lease.GetExpiresAtMs() > c.LeaseTimeMs)
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
		c.AddJob(x.QueueJob.GetState())
	case *fsmv1.SnapshotRecord_Schedule:
		c.Schedules++
	case *fsmv1.SnapshotRecord_QueueTarget:
		c.QueueTargets++
	case *fsmv1.SnapshotRecord_QueuePause:
		c.PausedQueues++
	case *fsmv1.SnapshotRecord_BulkOp:
		c.BulkOps++
	case *fsmv1.SnapshotRecord_QueueLimits:
		c.QueueLimits++
	default:
		return errors.New("snapshot: a record of a type this build does not know")
	}
	return nil
}

// AddLease counts a lease of generation gen, live or not.
func (c *Counts) AddLease(gen uint64, live bool) {
	c.Leases++
	c.MaxGeneration = max(c.MaxGeneration, gen)
	if live {
		c.LiveLeases++
	}
}

// AddJob counts a queue job in its state (by its short name: AVAILABLE).
func (c *Counts) AddJob(s fsmv1.JobState) {
	c.Jobs++
	c.JobsByState[strings.TrimPrefix(s.String(), "JOB_STATE_")]++
}
