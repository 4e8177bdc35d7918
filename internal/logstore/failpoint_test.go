//go:build failpoints

package logstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// With COORDD_TEST_FAILPOINTS=block-store-logs, StoreLogs waits while the
// block file exists in the data dir and goes through once it is removed;
// the store stays a raft.MonotonicLogStore where it was one.
func TestFailpointBlockStoreLogs(t *testing.T) {
	t.Setenv(failpointsEnv, blockStoreLogs)
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) {
			dir := t.TempDir()
			var logs logBuf
			st := mustOpen(t, dir, Options{Kind: k, Logger: logs.logger()})
			defer closeStore(t, st)
			m, ok := st.Logs.(raft.MonotonicLogStore)
			if got := ok && m.IsMonotonic(); got != (k == WAL) {
				t.Fatalf("monotonic = %v through the failpoint, want %v", got, k == WAL)
			}
			storeRange(t, st.Logs, 1, 3)

			block := filepath.Join(dir, BlockStoreLogsFile)
			if err := os.WriteFile(block, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- st.Logs.StoreLogs([]*raft.Log{entry(4)}) }()
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(logs.String(), "StoreLogs blocked") {
				if time.Now().After(deadline) {
					t.Fatalf("no StoreLogs blocked line: %s", logs.String())
				}
				time.Sleep(time.Millisecond)
			}
			if last, _ := st.Logs.LastIndex(); last != 3 {
				t.Fatalf("last index %d while StoreLogs is blocked, want 3", last)
			}
			if err := os.Remove(block); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("StoreLogs after the block file went: %v", err)
			}
			if last, _ := st.Logs.LastIndex(); last != 4 {
				t.Fatalf("last index %d after the write, want 4", last)
			}
		})
	}
}

// Without the variable the store is not wrapped.
func TestFailpointsOffWithoutEnv(t *testing.T) {
	t.Setenv(failpointsEnv, "")
	st := mustOpen(t, t.TempDir(), Options{Kind: Bolt})
	defer closeStore(t, st)
	if _, wrapped := st.Logs.(*blockingStore); wrapped {
		t.Fatal("the store is wrapped without COORDD_TEST_FAILPOINTS")
	}
}
