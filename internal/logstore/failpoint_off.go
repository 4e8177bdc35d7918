//go:build !failpoints

package logstore

import (
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// withFailpoints returns logs: failpoints exist only in test builds
// (failpoint.go, build tag failpoints).
func withFailpoints(_ string, logs raft.LogStore, _ hclog.Logger) raft.LogStore { return logs }
