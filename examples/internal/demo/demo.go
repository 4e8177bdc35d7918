// Package demo holds what the example programs share: a flag default from
// the environment, the fatal exit, the stores' commit counts before a run,
// and replica processes of the example itself whose output is merged into
// one channel of lines.
package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/coordd/coordd/client"
)

// Env returns the environment variable k, or def when it is unset or empty.
func Env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Fatal prints "prog: err" to stderr and exits 1.
func Fatal(prog string, err error) {
	fmt.Fprintln(os.Stderr, prog+":", err)
	os.Exit(1)
}

// Commits returns the accepted commits of the resources resource(1) to
// resource(n), indexed from 1; a resource that does not exist yet has 0.
// Earlier runs of an example on the same cluster wrote to them too, so a
// ledger counts from these.
func Commits(ctx context.Context, c *client.Client, n int, resource func(int) string) ([]uint64, error) {
	commits := make([]uint64, n+1)
	for i := 1; i <= n; i++ {
		r, err := c.GetResource(ctx, resource(i))
		switch {
		case err == nil:
			commits[i] = r.GetCommits()
		case !errors.Is(err, client.ErrNotFound):
			return nil, err
		}
	}
	return commits, nil
}

// Proc is a replica: this program run again as a child process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Spawn starts this program again with args; every line the child prints
// on stdout goes to lines, its stderr is ours.
func Spawn(name string, lines chan<- string, args ...string) (*Proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Name: name, Cmd: cmd, done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	go func() { wg.Wait(); p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Done is closed once the child exited and all its lines were sent.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the child's exit error, once Done is closed.
func (p *Proc) Err() error { return p.err }

// Kill wakes the child if it is stopped and kills it, by PID; it is reaped
// in the background.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGCONT)
	_ = p.Cmd.Process.Kill()
}

// Role runs what the --role flag names: "demo", the demo that starts
// replicas of this program, or "replica", one of them. A failure exits
// through Fatal.
func Role(prog, role string, demo, replica func() error) {
	var err error
	switch role {
	case "replica":
		err = replica()
	case "demo":
		err = demo()
	default:
		err = fmt.Errorf("--role %q: want demo or replica", role)
	}
	if err != nil {
		Fatal(prog, err)
	}
}
