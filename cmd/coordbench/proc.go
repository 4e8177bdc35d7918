package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/coordd/coordd/internal/proccluster"
)

// What Linux's /proc says about the processes of the tool's own cluster
// (--cluster) and about the tool itself.

// overNodes sums f(pid) over the running nodes of the tool's own cluster
// (-1 without --cluster).
func overNodes(cfg config, f func(pid int) int64) int64 {
	if cfg.cluster == nil {
		return -1
	}
	var total int64
	for _, nd := range cfg.cluster.Nodes {
		if nd.Running() {
			total += f(nd.Cmd.Process.Pid)
		}
	}
	return total
}

// cpuTicks sums utime+stime of the cluster's processes (in clock ticks).
func cpuTicks(cfg config) int64 { return overNodes(cfg, procTicks) }

// writeBytes sums /proc/PID/io write_bytes of the cluster's processes.
func writeBytes(cfg config) int64 {
	return overNodes(cfg, func(pid int) int64 { return procValue(pid, "io", "write_bytes:") })
}

// cpuByNode is each cluster node's utime+stime (clock ticks), by id.
func cpuByNode(cfg config) map[string]int64 {
	out := map[string]int64{}
	if cfg.cluster == nil {
		return out
	}
	for _, nd := range cfg.cluster.Nodes {
		if nd.Running() {
			out[nd.ID] = procTicks(nd.Cmd.Process.Pid)
		}
	}
	return out
}

// rssBytes is a node's resident set (VmRSS), or 0.
func rssBytes(nd *proccluster.Node) int64 {
	if !nd.Running() {
		return 0
	}
	return procValue(nd.Cmd.Process.Pid, "status", "VmRSS:") << 10
}

func selfTicks() int64 { return procTicks(os.Getpid()) }

// procTicks is a process's utime+stime (clock ticks), or 0.
func procTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

// procValue is the number after key on its line of /proc/PID/file (a
// status value without its kB unit), or 0.
func procValue(pid int, file, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}
