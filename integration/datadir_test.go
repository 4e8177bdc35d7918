package integration

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/coordd/coordd/internal/addrfile"
	"github.com/coordd/coordd/internal/testutil"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
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

// coordd on port 0 for gRPC, HTTP and Raft writes the addresses it bound
// to <data-dir>/addresses.json: each serves there (Status names the same
// Raft address, /healthz answers), none is port 0. Restarted on port 0
// after kill -9, it replaces the previous start's file with its new
// addresses.
func TestCoorddOnPortZeroWritesItsAddresses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "coordd-data")
	for run := range 2 {
		started := time.Now()
		cmd, log := startCoordd(t, dir)
		var a addrfile.Addresses
		testutil.Poll(t, "this start's address file", 20*time.Second, 10*time.Millisecond, func() bool {
			fi, err := os.Stat(addrfile.Path(dir))
			if err != nil || fi.ModTime().Before(started) {
				return false
			}
			a, err = addrfile.Read(dir)
			return err == nil
		})
		for _, addr := range []string{a.GRPC, a.HTTP, a.Raft} {
			if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
				t.Fatalf("run %d: address file %+v\n%s", run, a, log.String())
			}
		}
		if a.ID != "node1" {
			t.Fatalf("address file id %q", a.ID)
		}
		cc, err := grpc.NewClient(a.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		st, err := coordv1.NewClusterClient(cc).Status(ctxT(t), &coordv1.StatusRequest{})
		cc.Close()
		if err != nil || st.GetRaftAddress() != a.Raft || st.GetGrpcAddress() != a.GRPC {
			t.Fatalf("run %d: status %v, %v; address file %+v", run, st, err, a)
		}
		testutil.Poll(t, "/healthz on "+a.HTTP, 20*time.Second, 10*time.Millisecond, func() bool {
			resp, err := http.Get("http://" + a.HTTP + "/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
}
