package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// localCluster is a three-node coordd cluster of real processes that the
// tool starts (--cluster) and tears down, killing by PID.
type localCluster struct {
	bin   string
	dir   string
	peers string
	nodes []*node
	args  []string // extra coordd flags
}

type node struct {
	id, grpcAddr, raftAddr, dataDir string
	cmd                             *exec.Cmd
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startCluster(bin string, n int, args ...string) (*localCluster, error) {
	dir, err := os.MkdirTemp("", "coordbench-")
	if err != nil {
		return nil, err
	}
	lc := &localCluster{bin: bin, dir: dir, args: args}
	var peers []string
	for i := 1; i <= n; i++ {
		g, err := freeAddr()
		if err != nil {
			return nil, err
		}
		r, err := freeAddr()
		if err != nil {
			return nil, err
		}
		nd := &node{id: fmt.Sprintf("node%d", i), grpcAddr: g, raftAddr: r, dataDir: filepath.Join(dir, fmt.Sprintf("node%d", i))}
		lc.nodes = append(lc.nodes, nd)
		peers = append(peers, nd.id+"="+r)
	}
	lc.peers = strings.Join(peers, ",")
	for _, nd := range lc.nodes {
		if err := lc.start(nd); err != nil {
			lc.stop()
			return nil, err
		}
	}
	if _, err := lc.waitLeader(20 * time.Second); err != nil {
		lc.stop()
		return nil, err
	}
	return lc, nil
}

func (lc *localCluster) start(nd *node) error {
	logf, err := os.OpenFile(filepath.Join(lc.dir, nd.id+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	nd.cmd = exec.Command(lc.bin, append([]string{"--id", nd.id, "--data-dir", nd.dataDir, "--grpc-addr", nd.grpcAddr,
		"--raft-addr", nd.raftAddr, "--http-addr", "", "--peers", lc.peers, "--log-level", "warn"}, lc.args...)...)
	nd.cmd.Stdout, nd.cmd.Stderr = logf, logf
	// The nodes die with the load generator, however it ends.
	nd.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return nd.cmd.Start()
}

func (lc *localCluster) kill(nd *node) {
	if nd.cmd != nil && nd.cmd.Process != nil {
		_ = nd.cmd.Process.Signal(syscall.SIGKILL)
		_ = nd.cmd.Wait()
	}
	nd.cmd = nil
}

func (lc *localCluster) stop() {
	for _, nd := range lc.nodes {
		lc.kill(nd)
	}
	os.RemoveAll(lc.dir)
}

func (lc *localCluster) endpoints() []string {
	var out []string
	for _, nd := range lc.nodes {
		out = append(out, nd.grpcAddr)
	}
	return out
}

// waitLeader polls Status until a running node reports itself leader.
func (lc *localCluster) waitLeader(timeout time.Duration) (*node, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, nd := range lc.nodes {
			if nd.cmd == nil {
				continue
			}
			if leaderOf(nd.grpcAddr) {
				return nd, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("no leader within %s (logs in %s)", timeout, lc.dir)
}

func leaderOf(addr string) bool {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	st, err := coordv1.NewClusterClient(cc).Status(ctx, &coordv1.StatusRequest{})
	return err == nil && st.GetState() == "Leader"
}
