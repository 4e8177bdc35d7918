//go:build unix

package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// runnersSupported: lease run, elect and worker run commands (child.go).
const runnersSupported = true

var errNoRunners error // nil: supported

// monoNow reads CLOCK_MONOTONIC in nanoseconds: an instant another process
// can read too (child.go).
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// killProcess sends sig to pid (a group when negative).
func killProcess(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }

// commandProcAttr puts a guarded command in a process group of its own
// and, where the system can, has it killed when its guard dies.
func commandProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(a)
	return a
}
