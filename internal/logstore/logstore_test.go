package logstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/internal/testutil"
)

var kinds = []Kind{WAL, Bolt}

// logBuf collects what a store logs.
type logBuf struct{ testutil.Buffer }

func (l *logBuf) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: l, Level: hclog.Debug})
}

func mustOpen(t testing.TB, dir string, o Options) *Store {
	t.Helper()
	st, err := Open(dir, o)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return st
}

func closeStore(t testing.TB, st *Store) {
	t.Helper()
	if err := st.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func entry(i uint64) *raft.Log {
	return &raft.Log{Index: i, Term: 1 + i/100, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("cmd-%d-%s", i, strings.Repeat("x", int(i%50))))}
}

func storeRange(t *testing.T, ls raft.LogStore, from, to uint64) {
	t.Helper()
	var batch []*raft.Log
	for i := from; i <= to; i++ {
		batch = append(batch, entry(i))
		if len(batch) == 7 || i == to {
			if err := ls.StoreLogs(batch); err != nil {
				t.Fatalf("store %d..%d: %v", batch[0].Index, i, err)
			}
			batch = nil
		}
	}
}

// deleteRange deletes first..last from the log.
func deleteRange(t *testing.T, ls raft.LogStore, first, last uint64) {
	t.Helper()
	if err := ls.DeleteRange(first, last); err != nil {
		t.Fatalf("delete %d..%d: %v", first, last, err)
	}
}

// checkRange asserts the log holds exactly first..last, each as entry(i).
func checkRange(t *testing.T, ls raft.LogStore, first, last uint64) {
	t.Helper()
	if got, err := ls.FirstIndex(); err != nil || got != first {
		t.Fatalf("first index %d (%v), want %d", got, err, first)
	}
	if got, err := ls.LastIndex(); err != nil || got != last {
		t.Fatalf("last index %d (%v), want %d", got, err, last)
	}
	for i := first; i <= last && last > 0; i++ {
		var l raft.Log
		if err := ls.GetLog(i, &l); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		want := entry(i)
		if l.Index != i || l.Term != want.Term || !bytes.Equal(l.Data, want.Data) {
			t.Fatalf("entry %d: got index %d term %d data %q", i, l.Index, l.Term, l.Data)
		}
	}
	var l raft.Log
	if err := ls.GetLog(last+1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("get %d past the end: %v, want ErrLogNotFound", last+1, err)
	}
}

func TestNewDataDirGetsTheRequestedOrDefaultStore(t *testing.T) {
	for _, want := range []Kind{"", WAL, Bolt} {
		t.Run(fmt.Sprintf("requested=%q", want), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			var logs logBuf
			st := mustOpen(t, dir, Options{Kind: want, Logger: logs.logger()})
			defer closeStore(t, st)
			exp := want
			if exp == "" {
				exp = Default
			}
			if st.Kind != exp || !st.New {
				t.Fatalf("kind %q new %v, want %q new", st.Kind, st.New, exp)
			}
			if got, err := Detect(dir); err != nil || got != exp {
				t.Fatalf("detect: %q %v", got, err)
			}
			if !strings.Contains(logs.String(), "raft log store opened") || !strings.Contains(logs.String(), "store="+string(exp)) ||
				!strings.Contains(logs.String(), `origin="new data dir"`) {
				t.Fatalf("open not logged: %s", logs.String())
			}
		})
	}
}

func TestExistingDataDirKeepsItsStore(t *testing.T) {
	for _, created := range kinds {
		t.Run(string(created), func(t *testing.T) {
			dir := t.TempDir()
			st := mustOpen(t, dir, Options{Kind: created})
			storeRange(t, st.Logs, 1, 10)
			closeStore(t, st)
			for _, req := range []Kind{"", WAL, Bolt} {
				var logs logBuf
				st := mustOpen(t, dir, Options{Kind: req, Logger: logs.logger()})
				if st.Kind != created || st.New {
					t.Fatalf("requested %q: opened %q (new %v), want the existing %q", req, st.Kind, st.New, created)
				}
				checkRange(t, st.Logs, 1, 10)
				closeStore(t, st)
				warned := strings.Contains(logs.String(), "keeps the Raft log store it was created with")
				if warned != (req != "" && req != created) {
					t.Fatalf("requested %q on a %s dir: warned %v: %s", req, created, warned, logs.String())
				}
				if !strings.Contains(logs.String(), `origin="existing data dir"`) {
					t.Fatalf("not logged as existing: %s", logs.String())
				}
			}
		})
	}
}

func TestBothStoresInOneDataDirIsAnError(t *testing.T) {
	dir := t.TempDir()
	closeStore(t, mustOpen(t, dir, Options{Kind: WAL}))
	other := t.TempDir()
	closeStore(t, mustOpen(t, other, Options{Kind: Bolt}))
	if err := os.Rename(filepath.Join(other, BoltFile), filepath.Join(dir, BoltFile)); err != nil {
		t.Fatal(err)
	}
	for _, req := range []Kind{"", WAL, Bolt} {
		_, err := Open(dir, Options{Kind: req})
		if err == nil || !strings.Contains(err.Error(), "two Raft log stores") || !strings.Contains(err.Error(), "raft.db") {
			t.Fatalf("requested %q: %v, want a refusal naming both stores", req, err)
		}
	}
	if _, err := Detect(dir); err == nil {
		t.Fatal("detect accepted two stores")
	}
}

func TestBadKindAndSize(t *testing.T) {
	if _, err := Open(t.TempDir(), Options{Kind: "rocks"}); err == nil || !strings.Contains(err.Error(), "want wal or bolt") {
		t.Fatalf("unknown kind: %v", err)
	}
	if k, err := ParseKind(" WAL "); err != nil || k != WAL {
		t.Fatalf("parse: %q %v", k, err)
	}
	for in, want := range map[string]int{"0": 0, "4096": 4096, "64MiB": 64 << 20, "256K": 256 << 10, "1 GiB": 1 << 30, "2M": 2 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "64MB", "2GiB", "x"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}

func TestDataDirIsLocked(t *testing.T) {
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			dir := t.TempDir()
			st := mustOpen(t, dir, Options{Kind: k})
			if _, err := Open(dir, Options{Kind: k}); err == nil || !strings.Contains(err.Error(), "holds the data directory") {
				t.Fatalf("second open: %v", err)
			}
			closeStore(t, st)
			closeStore(t, mustOpen(t, dir, Options{Kind: k}))
		})
	}
}

func TestLogsAndStableValuesSurviveReopen(t *testing.T) {
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			dir := t.TempDir()
			st := mustOpen(t, dir, Options{Kind: k, WALSegmentSize: 16 << 10}) // small segments: several rotations
			storeRange(t, st.Logs, 1, 600)
			if err := st.Stable.SetUint64([]byte("CurrentTerm"), 7); err != nil {
				t.Fatal(err)
			}
			if err := st.Stable.Set([]byte("LastVoteCand"), []byte("node2")); err != nil {
				t.Fatal(err)
			}
			closeStore(t, st)
			st = mustOpen(t, dir, Options{Kind: k})
			defer closeStore(t, st)
			checkRange(t, st.Logs, 1, 600)
			if v, err := st.Stable.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
				t.Fatalf("term %d %v", v, err)
			}
			if v, err := st.Stable.Get([]byte("LastVoteCand")); err != nil || string(v) != "node2" {
				t.Fatalf("vote %q %v", v, err)
			}
			// raft accepts both answers for an unset key: 0, or the error "not found".
			if v, err := st.Stable.GetUint64([]byte("unset")); v != 0 || (err != nil && err.Error() != "not found") {
				t.Fatalf("unset key: %d %v", v, err)
			}
			storeRange(t, st.Logs, 601, 650)
			checkRange(t, st.Logs, 1, 650)
		})
	}
}

// DeleteRange as raft uses it: the head after a snapshot (compaction), the
// tail when a new leader's entries conflict, the whole log after a snapshot
// is installed; each survives a reopen, and appends continue after it.
func TestTruncationSurvivesReopen(t *testing.T) {
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			dir := t.TempDir()
			reopen := func(st *Store) *Store {
				closeStore(t, st)
				return mustOpen(t, dir, Options{Kind: k, WALSegmentSize: 8 << 10})
			}
			st := mustOpen(t, dir, Options{Kind: k, WALSegmentSize: 8 << 10})
			storeRange(t, st.Logs, 1, 500)

			// Compaction after a snapshot: the head goes, across segments.
			deleteRange(t, st.Logs, 1, 300)
			checkRange(t, st.Logs, 301, 500)
			st = reopen(st)
			checkRange(t, st.Logs, 301, 500)

			// A conflicting suffix (raft-wal before v0.4.1 lost the index of the
			// segment cut here: the next open could not read it).
			deleteRange(t, st.Logs, 451, 500)
			checkRange(t, st.Logs, 301, 450)
			st = reopen(st)
			checkRange(t, st.Logs, 301, 450)
			storeRange(t, st.Logs, 451, 520)
			checkRange(t, st.Logs, 301, 520)
			st = reopen(st)
			checkRange(t, st.Logs, 301, 520)

			// A cut inside the tail segment, twice, then appends.
			for _, cut := range []uint64{515, 512} {
				deleteRange(t, st.Logs, cut, 520)
			}
			st = reopen(st)
			checkRange(t, st.Logs, 301, 511)
			storeRange(t, st.Logs, 512, 530)
			st = reopen(st)
			checkRange(t, st.Logs, 301, 530)

			// An installed snapshot clears the whole log; the next entry
			// follows the snapshot, far ahead.
			deleteRange(t, st.Logs, 301, 530)
			st = reopen(st)
			checkRange(t, st.Logs, 0, 0)
			storeRange(t, st.Logs, 2001, 2100)
			st = reopen(st)
			checkRange(t, st.Logs, 2001, 2100)
			closeStore(t, st)
		})
	}
}
