package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coordd/coordd/internal/proccluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// forwarded sums coordd_forwarded_requests_total (calls a follower
// forwarded to the leader) over the running nodes' /metrics.
func forwarded(lc *proccluster.Cluster) (float64, error) {
	var total float64
	for _, nd := range lc.Nodes {
		if !nd.Running() || nd.HTTPAddr == "" {
			continue
		}
		v, err := scrape("http://"+nd.HTTPAddr+"/metrics", "coordd_forwarded_requests_total")
		if err != nil {
			return 0, fmt.Errorf("%s: %w", nd.ID, err)
		}
		total += v
	}
	return total, nil
}

// scrape reads one unlabelled sample from a Prometheus text endpoint.
func scrape(url, metric string) (float64, error) {
	hc := http.Client{Timeout: 10 * time.Second} // a node busy applying a large backlog answers slowly
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

// ordered returns the endpoints with the leader (the first that isLeader
// says leads) first ("leader") or last, behind the followers ("follower");
// "" keeps them as given.
func ordered(endpoints []string, first string, isLeader func(endpoint string) bool) ([]string, error) {
	if first == "" {
		return endpoints, nil
	}
	var leader string
	var followers []string
	for _, ep := range endpoints {
		if leader == "" && isLeader(ep) {
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

// leaderOf reports whether the node at addr says it is the leader.
func leaderOf(addr string) bool {
	cc, err := dial(addr)
	if err != nil {
		return false
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := coordv1.NewClusterClient(cc).Status(ctx, &coordv1.StatusRequest{})
	return err == nil && st.GetState() == "Leader"
}
