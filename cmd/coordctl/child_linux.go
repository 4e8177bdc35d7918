package main

import "syscall"

// setDeathSignal: the command gets SIGKILL should its guard die.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
