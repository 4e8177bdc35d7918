//go:build unix && !linux

package main

import "syscall"

// setDeathSignal: no parent-death signal outside Linux; a command whose
// guard is killed with kill -9 runs on (its writes are still fenced).
func setDeathSignal(*syscall.SysProcAttr) {}
