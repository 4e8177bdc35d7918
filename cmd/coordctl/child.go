package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coordd/coordd/clock"
)

// A command that coordctl runs under a lease or a job attempt (lease run,
// elect, worker) does not run as coordctl's own child: it runs under a
// guard, a second coordctl process between the two, which holds the local
// deadline and kills the command's process group before it passes:
//
//	coordctl (lease, renewals) --pipe: deadlines, stop--> guard --> CMD (own process group)
//
// coordctl sends the guard every move of the local deadline (the SDK's:
// send time of the last acknowledged renewal or heartbeat + TTL − margin)
// as an instant of CLOCK_MONOTONIC, which both processes read. The guard
// sends SIGTERM to the group kill-grace before the deadline and SIGKILL at
// the deadline, so the command is dead before the server could grant the
// lease (or hand the job) to anyone else — also when coordctl itself is
// frozen (SIGSTOP, a swapped-out or starved process) or killed, since the
// guard then reads no new deadline (or EOF, and stops the command at once).
// A host frozen as a whole freezes the command too; its writes after it
// wakes are refused by fencing (COORDD_FENCING_TOKEN), not by this.

// guardEnv names the environment variable that makes coordctl a guard:
// its value is the kill grace; the arguments are the command.
const (
	guardEnv     = "COORDCTL_GUARD"
	guardWhatEnv = "COORDCTL_GUARD_WHAT" // what the deadline belongs to, for its messages
)

// childSpec is a command to run under a guard.
type childSpec struct {
	argv      []string
	env       []string // added to coordctl's environment
	stdin     io.Reader
	stdout    io.Writer
	stderr    io.Writer
	killGrace time.Duration
	what      string // "lease daily-close generation 7", "job 12 attempt 1"
}

// child is a running command under its guard.
type child struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	ctl  *os.File // the guard's control pipe (write end); nil once closed
	done chan struct{}
}

// startChild starts spec's command under a guard whose first deadline is
// deadline.
func startChild(spec childSpec, deadline time.Time) (*child, error) {
	if !runnersSupported {
		return nil, errNoRunners
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find coordctl's executable to run the guard: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	c := &child{ctl: w, done: make(chan struct{})}
	c.setDeadline(deadline) // in the pipe before the guard starts: it never runs without one
	cmd := exec.Command(self, spec.argv...)
	cmd.Env = append(append(os.Environ(), spec.env...),
		guardEnv+"="+spec.killGrace.String(), guardWhatEnv+"="+spec.what)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.stdin, spec.stdout, spec.stderr
	cmd.ExtraFiles = []*os.File{r}
	// A background process of the command that keeps its output open must
	// not hold coordctl up after the command exited.
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	c.cmd = cmd
	go func() {
		_ = cmd.Wait() // the status is in cmd.ProcessState
		c.closeCtl()
		close(c.done)
	}()
	return c, nil
}

// setDeadline tells the guard the new local deadline.
func (c *child) setDeadline(t time.Time) {
	// Read the monotonic clock before time.Until: a pause in between makes
	// the deadline sent earlier, never later.
	mono := monoNow()
	c.send("D " + strconv.FormatInt(mono+int64(time.Until(t)), 10))
}

// stop asks the guard to stop the command now: SIGTERM, SIGKILL after the
// kill grace (or at the deadline, if that is sooner).
func (c *child) stop(reason string) {
	c.send("S " + strings.ReplaceAll(reason, "\n", " "))
}

func (c *child) send(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctl != nil {
		_, _ = io.WriteString(c.ctl, line+"\n") // a guard that is gone has stopped the command
	}
}

func (c *child) closeCtl() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctl != nil {
		c.ctl.Close()
		c.ctl = nil
	}
}

// Done is closed when the guard (and so the command) exited.
func (c *child) Done() <-chan struct{} { return c.done }

// exitCode is the command's exit status once Done: its code, 128 + the
// signal that killed it, or 127 when it could not be started.
func (c *child) exitCode() int {
	<-c.done
	if c.cmd.ProcessState == nil {
		return 127
	}
	return exitStatus(c.cmd.ProcessState) // the guard exits with the command's status
}

// guardMain is coordctl as a guard (guardEnv set): it runs argv in its own
// process group and exits with its status. Control lines on fd 3: "D <ns>"
// moves the deadline (CLOCK_MONOTONIC), "S <reason>" stops the command;
// EOF (coordctl is gone) stops it too, as do SIGINT, SIGTERM and SIGHUP.
func guardMain(argv []string, errOut io.Writer) int {
	grace, err := time.ParseDuration(os.Getenv(guardEnv))
	if err != nil || len(argv) == 0 {
		fmt.Fprintf(errOut, "coordctl guard: bad invocation (%s=%q, %d arguments)\n", guardEnv, os.Getenv(guardEnv), len(argv))
		return exitUsage
	}
	if !runnersSupported {
		fmt.Fprintf(errOut, "coordctl guard: %v\n", errNoRunners)
		return exitError
	}
	what := os.Getenv(guardWhatEnv)
	os.Unsetenv(guardEnv)
	os.Unsetenv(guardWhatEnv)
	ctl := os.NewFile(3, "control")
	msgs := make(chan string)
	go func() {
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			msgs <- sc.Text()
		}
		msgs <- "S coordctl exited"
	}()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	// Its stderr may be a pipe to a coordctl that is gone: a message must
	// not kill the guard before it stopped the command.
	signal.Ignore(syscall.SIGPIPE)

	// The first deadline is in the pipe already.
	g := newGuard(clock.Real{}, monoNow, grace, what, errOut)
	if first := <-msgs; !g.control(first) {
		return 127 // stopped before it started
	}
	// Pdeathsig follows the thread that started the command: keep it.
	runtime.LockOSThread()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Its own group, so that the signals reach what it started too; and
	// (on Linux) SIGKILL should the guard die.
	cmd.SysProcAttr = commandProcAttr()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(errOut, "coordctl: cannot run %s: %v\n", argv[0], err)
		return 127
	}
	g.pid = cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	g.loop(exited, msgs, sigs)
	return exitStatus(cmd.ProcessState)
}

// loop runs the guard until the command exited.
func (g *guard) loop(exited <-chan struct{}, msgs <-chan string, sigs <-chan os.Signal) {
	for {
		select {
		case <-exited:
			g.timers(nil)
			// Nothing the command started in its group runs on after it:
			// the lease is released (or the attempt reported) next.
			_ = g.kill(-g.pid, syscall.SIGKILL)
			g.flush()
			return
		case m := <-msgs:
			g.control(m)
		case s := <-sigs:
			g.stopNow("coordctl's guard got " + s.String())
		case <-g.termC:
			g.signal(syscall.SIGTERM, fmt.Sprintf("the local deadline of %s is %s away and no renewal moved it", g.what, g.grace))
			g.termT, g.termC = nil, nil
		case <-g.killC:
			g.signal(syscall.SIGKILL, "")
			g.killT, g.killC = nil, nil
		}
	}
}

// exitStatus is a command's exit status as a shell reports it: its exit
// code, or 128 + the signal that killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// guard is the state of a guard's loop: the deadline and its two timers.
type guard struct {
	clk      clock.Clock
	mono     func() int64                            // CLOCK_MONOTONIC now (monoNow)
	kill     func(pid int, sig syscall.Signal) error // syscall.Kill
	grace    time.Duration
	what     string
	errOut   io.Writer
	pid      int // the command's (and its group's) id; -1 before it starts
	deadline time.Time
	termed   bool // SIGTERM sent
	stopped  bool // told to stop: SIGKILL at killAt
	killAt   time.Time
	termT    clock.Timer
	killT    clock.Timer
	termC    <-chan time.Time
	killC    <-chan time.Time
	said     chan string   // messages to errOut (say); "" asks for flushed
	flushed  chan struct{} // the messages before a "" are written
}

func newGuard(clk clock.Clock, mono func() int64, grace time.Duration, what string, errOut io.Writer) *guard {
	return &guard{clk: clk, mono: mono, kill: killProcess, grace: grace, what: what, errOut: errOut, pid: -1}
}

// control applies one control line; false when it stops the command.
func (g *guard) control(m string) bool {
	op, arg, _ := strings.Cut(m, " ")
	switch op {
	case "D":
		ns, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			g.stopNow("bad deadline from coordctl: " + arg)
			return false
		}
		if d := g.clk.Now().Add(time.Duration(ns - g.mono())); d.After(g.deadline) {
			g.deadline = d
			g.schedule()
		}
		return !g.stopped
	default:
		g.stopNow(arg)
		return false
	}
}

// stopNow sends SIGTERM now and SIGKILL after the grace (or at the
// deadline, if sooner).
func (g *guard) stopNow(reason string) {
	if !g.termed && g.pid > 0 {
		g.signal(syscall.SIGTERM, reason)
	}
	if !g.stopped {
		g.stopped = true
		g.killAt = g.clk.Now().Add(g.grace)
		g.schedule()
	}
}

// schedule arms SIGTERM at deadline − grace and SIGKILL at the deadline
// (or killAt, if stopped and sooner).
func (g *guard) schedule() {
	killAt := g.deadline
	if g.stopped && g.killAt.Before(killAt) {
		killAt = g.killAt
	}
	g.timers(&killAt)
}

// timers (re)arms the timers for a kill at *killAt; nil stops them.
func (g *guard) timers(killAt *time.Time) {
	for _, t := range []clock.Timer{g.termT, g.killT} {
		if t != nil {
			t.Stop()
		}
	}
	g.termT, g.killT, g.termC, g.killC = nil, nil, nil, nil
	if killAt == nil {
		return
	}
	g.killT = clock.NewTimerAt(g.clk, *killAt)
	g.killC = g.killT.C()
	if !g.termed {
		g.termT = clock.NewTimerAt(g.clk, g.deadline.Add(-g.grace))
		g.termC = g.termT.C()
	}
}

// signal sends sig to the command's process group.
func (g *guard) signal(sig syscall.Signal, reason string) {
	if g.pid <= 0 {
		return
	}
	_ = g.kill(-g.pid, sig)
	if sig == syscall.SIGTERM {
		g.termed = true
		g.say(fmt.Sprintf("coordctl: %s: sent SIGTERM to %d (SIGKILL in %s)\n", reason, g.pid, g.grace))
	} else {
		g.say(fmt.Sprintf("coordctl: sent SIGKILL to %d (%s)\n", g.pid, g.what))
	}
}

// flush waits a little for the messages said to be written.
func (g *guard) flush() {
	if g.said == nil {
		return
	}
	select {
	case g.said <- "": // the writer answers it after every message before it
	default:
		return
	}
	select {
	case <-g.flushed:
	case <-time.After(100 * time.Millisecond): // real time: the process is about to exit
	}
}

// say writes a message on another goroutine: stderr may be a pipe that a
// frozen coordctl does not read, and the loop must go on to the SIGKILL.
func (g *guard) say(msg string) {
	if g.said == nil {
		g.said, g.flushed = make(chan string, 8), make(chan struct{}, 1)
		go func() {
			for m := range g.said {
				if m == "" {
					g.flushed <- struct{}{}
					continue
				}
				_, _ = io.WriteString(g.errOut, m)
			}
		}()
	}
	select {
	case g.said <- msg:
	default: // stderr is stuck: the message is lost, not the loop
	}
}
