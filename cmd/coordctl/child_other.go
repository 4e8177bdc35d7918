//go:build !unix

package main

import (
	"errors"
	"syscall"
	"time"
)

// runnersSupported: lease run, elect and worker need process groups and
// signals (child.go).
const runnersSupported = false

var errNoRunners = errors.New("lease run, elect and worker need a Unix system (process groups, signals)")

func monoNow() int64 { return time.Now().UnixNano() }

func killProcess(int, syscall.Signal) error { return errNoRunners }

func commandProcAttr() *syscall.SysProcAttr { return nil }
