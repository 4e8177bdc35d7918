package integration

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/testutil"
)

// startCoordd starts a single-node coordd on dir on port 0; the
// process is killed at cleanup.
func startCoordd(t *testing.T, dir string) (*exec.Cmd, *testutil.Buffer) {
	t.Helper()
	cmd := exec.Command(coorddBin, "--data-dir", dir, "--grpc-addr", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0")
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	log := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, log
}

func awaitLog(t *testing.T, log *testutil.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log within 20 s:\n%s", want, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A second coordd on a data directory in use fails at once, naming the
// first one's PID (before, it timed out opening the Raft log, or died on
// its ports); after kill -9 of the first, the kernel has released the lock
// and the next coordd starts.
func TestSecondCoorddOnADataDirectoryFailsAtOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "coordd-data")
	first, firstLog := startCoordd(t, dir)
	awaitLog(t, firstLog, "coordd node started")

	second, secondLog := startCoordd(t, dir)
	done := make(chan error, 1)
	go func() { done <- second.Wait() }()
	select {
	case err := <-done:
		want := fmt.Sprintf("coordd: another coordd (pid %d) holds the data directory %s", first.Process.Pid, dir)
		if err == nil || !strings.Contains(secondLog.String(), want) {
			t.Fatalf("second coordd: %v, want exit 1 with %q:\n%s", err, want, secondLog.String())
		}
	case <-time.After(5 * time.Second):
		_ = second.Process.Kill()
		<-done
		t.Fatalf("second coordd on the same data directory still runs after 5 s:\n%s", secondLog.String())
	}

	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	_, thirdLog := startCoordd(t, dir)
	awaitLog(t, thirdLog, "coordd node started")
}
