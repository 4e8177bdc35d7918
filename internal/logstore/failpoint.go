//go:build failpoints

package logstore

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Failpoints for the fault suite (integration/faults builds coordd with
// -tags failpoints; a build without the tag has none, failpoint_off.go).
//
// COORDD_TEST_FAILPOINTS=block-store-logs: while the file
// BlockStoreLogsFile exists in the data dir, every StoreLogs waits before
// it reaches the store. On a leader with the parallel write the entries are
// replicated and committed by the followers meanwhile, so a kill -9 then
// lands between the replication of acknowledged entries and the leader's
// own write of them.
const (
	failpointsEnv      = "COORDD_TEST_FAILPOINTS"
	blockStoreLogs     = "block-store-logs"
	BlockStoreLogsFile = "FAILPOINT_BLOCK_STORE_LOGS"
)

func withFailpoints(dir string, logs raft.LogStore, log hclog.Logger) raft.LogStore {
	on := false
	for _, f := range strings.Split(os.Getenv(failpointsEnv), ",") {
		on = on || strings.TrimSpace(f) == blockStoreLogs
	}
	if !on {
		return logs
	}
	log.Warn("TEST FAILPOINT: StoreLogs waits while the block file exists", "file", filepath.Join(dir, BlockStoreLogsFile))
	return &blockingStore{LogStore: logs, file: filepath.Join(dir, BlockStoreLogsFile), log: log}
}

type blockingStore struct {
	raft.LogStore
	file string
	log  hclog.Logger
}

func (b *blockingStore) StoreLog(l *raft.Log) error { return b.StoreLogs([]*raft.Log{l}) }

func (b *blockingStore) StoreLogs(logs []*raft.Log) error {
	if _, err := os.Stat(b.file); err == nil {
		b.log.Warn("TEST FAILPOINT: StoreLogs blocked", "first", logs[0].Index, "last", logs[len(logs)-1].Index)
		for {
			if _, err := os.Stat(b.file); err != nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		b.log.Warn("TEST FAILPOINT: StoreLogs released")
	}
	return b.LogStore.StoreLogs(logs)
}

// IsMonotonic passes raft.MonotonicLogStore through (the wal store is one).
func (b *blockingStore) IsMonotonic() bool {
	m, ok := b.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
