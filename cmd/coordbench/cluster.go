package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
}

type node struct {
	id, grpcAddr, raftAddr, httpAddr, dataDir string
	cmd                                       *exec.Cmd
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startCluster(bin string, n int) (*localCluster, error) {
	dir, err := os.MkdirTemp("", "coordbench-")
	if err != nil {
		return nil, err
	}
	lc := &localCluster{bin: bin, dir: dir}
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
		h, err := freeAddr()
		if err != nil {
			return nil, err
		}
		nd := &node{id: fmt.Sprintf("node%d", i), grpcAddr: g, raftAddr: r, httpAddr: h, dataDir: filepath.Join(dir, fmt.Sprintf("node%d", i))}
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
	nd.cmd = exec.Command(lc.bin, "--id", nd.id, "--data-dir", nd.dataDir, "--grpc-addr", nd.grpcAddr,
		"--raft-addr", nd.raftAddr, "--http-addr", nd.httpAddr, "--peers", lc.peers, "--log-level", "warn")
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

// forwarded sums coordd_forwarded_requests_total (calls a follower
// forwarded to the leader) over the running nodes' /metrics.
func (lc *localCluster) forwarded() (float64, error) {
	var total float64
	for _, nd := range lc.nodes {
		if nd.cmd == nil {
			continue
		}
		v, err := scrape("http://"+nd.httpAddr+"/metrics", "coordd_forwarded_requests_total")
		if err != nil {
			return 0, fmt.Errorf("%s: %w", nd.id, err)
		}
		total += v
	}
	return total, nil
}

// scrape reads one unlabelled sample from a Prometheus text endpoint.
func scrape(url, metric string) (float64, error) {
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), metric+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in %s", metric, url)
}

// ordered returns the endpoints with the leader first ("leader") or last,
// behind the followers ("follower"); "" keeps them as given.
func ordered(endpoints []string, first string) ([]string, error) {
	if first == "" {
		return endpoints, nil
	}
	var leader string
	var followers []string
	for _, ep := range endpoints {
		if leader == "" && leaderOf(ep) {
			leader = ep
		} else {
			followers = append(followers, ep)
		}
	}
	if leader == "" {
		return nil, fmt.Errorf("no leader among %v", endpoints)
	}
	switch first {
	case "leader":
		return append([]string{leader}, followers...), nil
	case "follower":
		if len(followers) == 0 {
			return nil, fmt.Errorf("no follower among %v", endpoints)
		}
		return append(followers, leader), nil
	}
	return nil, fmt.Errorf("--first %q: leader or follower", first)
}
