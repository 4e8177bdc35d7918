package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/api"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/node"
)

// An environment variable that does not parse stops coordd at start with
// an error naming it (it used to mean the default: COORDD_LIMIT_RATE=abc
// was no limit at all).
func TestEnvThatDoesNotParseIsAnError(t *testing.T) {
	for name, value := range map[string]string{
		"LIMIT_RATE":             "abc",
		"LIMIT_RATE ":            "-1",
		"LIMIT_LEASES":           "many",
		"LIMIT_WAITING_ACQUIRES": "-3",
		"HEARTBEAT_TIMEOUT":      "500",
		"ENABLE_PPROF":           "yes",
		"INSECURE":               "on",
		"JOB_RETENTION":          "7d",
		"JOB_MAX_FINISHED":       "-1",
		"RAFT_WAL_SEGMENT_SIZE":  "64MB",
	} {
		name = strings.TrimSpace(name)
		t.Run(name+"="+value, func(t *testing.T) {
			t.Setenv("COORDD_"+name, value)
			_, err := parseFlags(nil)
			if err == nil || !strings.Contains(err.Error(), "COORDD_"+name) || !strings.Contains(err.Error(), value) {
				t.Fatalf("want an error naming COORDD_%s=%q, got %v", name, value, err)
			}
			if err := run(nil); err == nil || !strings.Contains(err.Error(), "COORDD_"+name) {
				t.Fatalf("run started anyway: %v", err)
			}
		})
	}
}

func TestEnvValues(t *testing.T) {
	t.Setenv("COORDD_LIMIT_RATE", "2.5")
	t.Setenv("COORDD_ENABLE_PPROF", "TRUE")
	t.Setenv("COORDD_INSECURE", "1")
	t.Setenv("COORDD_ELECTION_TIMEOUT", "2s")
	t.Setenv("COORDD_LIMIT_BURST", "") // empty: unset
	t.Setenv("COORDD_JOB_RETENTION", "48h")
	t.Setenv("COORDD_JOB_MAX_FINISHED", "5000")
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.rateLimit != 2.5 || !o.pprof || !o.insecure || o.election != 2*time.Second || o.burst != 0 ||
		o.jobRetention != 48*time.Hour || o.maxFinishedJobs != 5000 {
		t.Fatalf("%+v", o)
	}
	// The quotas have generous defaults (auth.DefaultLimits); 0 turns one off.
	dl := auth.DefaultLimits()
	if o.maxLiveJobs != uint(dl.LiveJobsPerIdentity) || o.maxSchedules != uint(dl.SchedulesPerIdentity) ||
		o.jobBytesRate != int(dl.JobBytesPerSecond) || o.scheduleJobsRate != dl.ScheduleJobsPerSecond || dl.LiveJobsPerIdentity == 0 {
		t.Fatalf("quota defaults: %+v", o)
	}
	t.Setenv("COORDD_LIMIT_JOB_BYTES_RATE", "8M")
	if o, err = parseFlags([]string{"--limit-live-jobs=0", "--limit-schedule-jobs-rate=0.5"}); err != nil || o.maxLiveJobs != 0 ||
		o.scheduleJobsRate != 0.5 || o.jobBytesRate != 8<<20 {
		t.Fatalf("%+v %v", o, err)
	}
	// Flags win over the environment.
	if o, err = parseFlags([]string{"--limit-rate=7", "--enable-pprof=false"}); err != nil || o.rateLimit != 7 || o.pprof {
		t.Fatalf("%+v %v", o, err)
	}
}

// Defaults are written once: the flags show the node's.
func TestFlagDefaultsAreTheNodes(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := node.Defaults()
	if o.heartbeat != d.HeartbeatTimeout || o.election != d.ElectionTimeout || o.retention != d.Retention ||
		o.jobRetention != d.JobRetention || o.maxFinishedJobs != d.MaxFinishedJobs {
		t.Fatalf("flag defaults %s %s %s, node defaults %s %s %s", o.heartbeat, o.election, o.retention,
			d.HeartbeatTimeout, d.ElectionTimeout, d.Retention)
	}
	ad := api.Defaults()
	if l := o.listen; l.readHeader != ad.HTTPReadHeaderTimeout || l.read != ad.HTTPReadTimeout || l.write != ad.HTTPWriteTimeout ||
		l.idle != ad.HTTPIdleTimeout || l.grpcConnect != ad.GRPCConnectionTimeout || l.grpcPing != ad.GRPCKeepaliveTime ||
		l.grpcPingTimeout != ad.GRPCKeepaliveTimeout {
		t.Fatalf("listener flag defaults %+v, the API's %+v", l, ad)
	}
}

// The fault suite's clock flags work but -h does not show them.
func TestTestClockFlagsHidden(t *testing.T) {
	fs := flag.NewFlagSet("coordd", flag.ContinueOnError)
	fs.Duration("test-clock-offset", 0, "hidden")
	fs.Float64("test-clock-rate", 1, "hidden")
	fs.String("grpc-addr", "127.0.0.1:7400", "gRPC listen address")
	var out bytes.Buffer
	fs.SetOutput(&out)
	usage(fs)
	if strings.Contains(out.String(), "test-clock") || !strings.Contains(out.String(), "-grpc-addr") ||
		!strings.Contains(out.String(), `(default "127.0.0.1:7400")`) {
		t.Fatalf("usage:\n%s", out.String())
	}
	o, err := parseFlags([]string{"--test-clock-offset=5m", "--test-clock-rate=2"})
	if err != nil || o.clockOffset != 5*time.Minute || o.clockRate != 2 {
		t.Fatalf("%+v %v", o, err)
	}
}

func TestRaftLogStoreFlags(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || o.logStore != "" || o.walSegment != 64<<20 {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	t.Setenv("COORDD_RAFT_LOG_STORE", "bolt")
	t.Setenv("COORDD_RAFT_WAL_SEGMENT_SIZE", "16MiB")
	if o, err = parseFlags(nil); err != nil || o.logStore != "bolt" || o.walSegment != 16<<20 {
		t.Fatalf("from the environment: %+v %v", o, err)
	}
	if o, err = parseFlags([]string{"--raft-log-store", "wal", "--raft-wal-segment-size", "512K"}); err != nil ||
		o.logStore != "wal" || o.walSegment != 512<<10 {
		t.Fatalf("flags over the environment: %+v %v", o, err)
	}
	for _, args := range [][]string{{"--raft-log-store", "rocks"}, {"--raft-wal-segment-size", "-1"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// A static cluster cannot name port 0 (no peer could dial it): coordd
// refuses before it binds anything, pointing at --join.
func TestPeersOnPortZeroAreRefused(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--data-dir", t.TempDir(), "--raft-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--http-addr", "",
			"--peers", "node1=127.0.0.1:0,node2=127.0.0.1:7422"})
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second): // it started and serves until a signal
		t.Fatal("coordd started with a peer on port 0")
	}
	if err == nil || !strings.Contains(err.Error(), "node1=127.0.0.1:0") || !strings.Contains(err.Error(), "--join") {
		t.Fatalf("err = %v", err)
	}
}

// The advertise addresses: unset by default (the bound ones), from the
// environment or the flags, and refused with the flag named when no peer
// could dial them.
func TestAdvertiseFlags(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || o.raftAdvertise != "" || o.grpcAdvertise != "" {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	t.Setenv("COORDD_RAFT_ADVERTISE_ADDR", "coordd-0.coordd-peer:7402")
	t.Setenv("COORDD_GRPC_ADVERTISE_ADDR", "coordd-0.coordd-peer:7400")
	if o, err = parseFlags(nil); err != nil || o.raftAdvertise != "coordd-0.coordd-peer:7402" || o.grpcAdvertise != "coordd-0.coordd-peer:7400" {
		t.Fatalf("from the environment: %+v %v", o, err)
	}
	if o, err = parseFlags([]string{"--raft-advertise-addr", "localhost:17402"}); err != nil || o.raftAdvertise != "localhost:17402" {
		t.Fatalf("flag over the environment: %+v %v", o, err)
	}
	for flag, bad := range map[string]string{"--raft-advertise-addr": "0.0.0.0:7402", "--grpc-advertise-addr": "coordd-0"} {
		if _, err := parseFlags([]string{flag, bad}); err == nil || !strings.Contains(err.Error(), flag) || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s %s: want an error naming the flag and the value, got %v", flag, bad, err)
		}
	}
}

func TestRaftParallelWriteFlag(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil || !o.parallelWrite {
		t.Fatalf("default: parallel write %v, %v; want on", o.parallelWrite, err)
	}
	t.Setenv("COORDD_RAFT_PARALLEL_WRITE", "false")
	if o, err = parseFlags(nil); err != nil || o.parallelWrite {
		t.Fatalf("from the environment: parallel write %v, %v; want off", o.parallelWrite, err)
	}
	if o, err = parseFlags([]string{"--raft-parallel-write=true"}); err != nil || !o.parallelWrite {
		t.Fatalf("flag over the environment: parallel write %v, %v; want on", o.parallelWrite, err)
	}
	t.Setenv("COORDD_RAFT_PARALLEL_WRITE", "sometimes")
	if _, err := parseFlags(nil); err == nil || !strings.Contains(err.Error(), "COORDD_RAFT_PARALLEL_WRITE") {
		t.Fatalf("a bad COORDD_RAFT_PARALLEL_WRITE: %v, want an error naming it", err)
	}
}
