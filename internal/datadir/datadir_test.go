package datadir

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The helper process of TestCrashReleasesTheLock: it locks the directory
// named by DATADIR_TEST_HOLD, says so, and waits to be killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("DATADIR_TEST_HOLD"); dir != "" {
		if _, err := Acquire(dir); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("locked")
		select {}
	}
	os.Exit(m.Run())
}

func TestSecondLockFailsAtOnceNamingTheHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // created by Acquire
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil || string(b) != fmt.Sprintf("%d\n", os.Getpid()) {
		t.Fatalf("LOCK holds %q (%v), want this PID", b, err)
	}
	// flock is per open file: a second open in the same process conflicts.
	_, err = Acquire(dir)
	var held *HeldError
	if !errors.As(err, &held) || held.PID != os.Getpid() || held.Dir != dir {
		t.Fatalf("second Acquire: %v, want a HeldError naming pid %d", err, os.Getpid())
	}
	want := fmt.Sprintf("another coordd (pid %d) holds the data directory %s", os.Getpid(), dir)
	if err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

func TestUnreadablePIDStillRefuses(t *testing.T) {
	if got := (&HeldError{Dir: "d"}).Error(); got != "another coordd holds the data directory d" {
		t.Fatal(got)
	}
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	var held *HeldError
	if _, err := Acquire(dir); !errors.As(err, &held) || held.PID != 0 {
		t.Fatalf("Acquire: %v, want a HeldError without a PID", err)
	}
}

func TestNotADirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var held *HeldError
	if _, err := Acquire(f); err == nil || errors.As(err, &held) {
		t.Fatalf("Acquire on a file: %v, want a plain error", err)
	}
}

// A holder killed with SIGKILL releases the lock (the kernel does): the
// stale LOCK file with its PID does not block the next process.
func TestCrashReleasesTheLock(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DATADIR_TEST_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("helper: %q %v", line, err)
	}
	var held *HeldError
	if _, err := Acquire(dir); !errors.As(err, &held) || held.PID != cmd.Process.Pid {
		t.Fatalf("Acquire while the helper holds it: %v, want pid %d", err, cmd.Process.Pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	l.Release()
}
