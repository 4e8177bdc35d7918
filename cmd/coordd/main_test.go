package main

import (
	"errors"
	"log/slog"
	"os"
	"syscall"
	"testing"
)

// coordd ends with the error of a listener that stopped serving (run
// returns it: exit status 1), reloads on SIGHUP, and ends cleanly on
// SIGTERM.
func TestWaitForStop(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	failed := make(chan error, 1)
	boom := errors.New("gRPC server stopped serving: accept: closed")
	failed <- boom
	if err := waitForStop(log, make(chan os.Signal), failed, func() { t.Fatal("reloaded") }); !errors.Is(err, boom) {
		t.Fatalf("a Serve error: waitForStop = %v, want it", err)
	}
	sig := make(chan os.Signal, 2)
	sig <- syscall.SIGHUP
	sig <- syscall.SIGTERM
	reloads := 0
	if err := waitForStop(log, sig, make(chan error), func() { reloads++ }); err != nil || reloads != 1 {
		t.Fatalf("SIGHUP then SIGTERM: err %v, %d reloads", err, reloads)
	}
}
