package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A workload item of --workload may carry its own settings after colons,
// so that one invocation (one cluster per round) runs workloads that need
// different ones:
//
//	queue:rate=10000:duration=30s:clients=4,queue:rate=100,queue-single:clients=64,acquire-release
//
// Keys: clients (one count; overrides --clients), duration, warmup, rate
// (--queue-rate), batch (--queue-batch), concurrency (--queue-concurrency),
// workers (--queue-workers), jobs (--delayed-jobs), delay-max (--delay-max),
// fetch-max (--fetch-max), raw (1: --queue-raw, 0: the SDK's workers),
// coalesce (--submit-coalescing; 0: off). An item with settings tags its lines with
// "spec" (the item as given).
type workloadSpec struct {
	name    string
	raw     string // the item as given; "" without settings
	clients []int  // nil: --clients
	apply   func(cfg *config, q *queueConfig)
}

// queueCounts are the settings that set a count of queueConfig.
var queueCounts = map[string]func(q *queueConfig) *int{
	"rate":        func(q *queueConfig) *int { return &q.rate },
	"batch":       func(q *queueConfig) *int { return &q.batch },
	"concurrency": func(q *queueConfig) *int { return &q.concurrency },
	"workers":     func(q *queueConfig) *int { return &q.workers },
	"jobs":        func(q *queueConfig) *int { return &q.delayed },
	"coalesce":    func(q *queueConfig) *int { return &q.coalesce },
	"fetch-max":   func(q *queueConfig) *int { return &q.fetchMax },
}

func parseWorkloadSpec(item string) (workloadSpec, error) {
	parts := strings.Split(item, ":")
	s := workloadSpec{name: parts[0], apply: func(*config, *queueConfig) {}}
	if _, ok := workloadFuncs[s.name]; !ok {
		return s, fmt.Errorf("unknown workload %q", s.name)
	}
	if len(parts) == 1 {
		return s, nil
	}
	s.raw = item
	var sets []func(cfg *config, q *queueConfig)
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return s, fmt.Errorf("workload %q: setting %q is not key=value", item, kv)
		}
		switch k {
		case "duration", "warmup", "delay-max":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || (k == "duration" && d == 0) {
				return s, fmt.Errorf("workload %q: %s=%q is not a positive duration", item, k, v)
			}
			sets = append(sets, map[string]func(*config, *queueConfig){
				"duration":  func(c *config, _ *queueConfig) { c.duration = d },
				"warmup":    func(c *config, _ *queueConfig) { c.warmup = d },
				"delay-max": func(_ *config, q *queueConfig) { q.delayMax = d },
			}[k])
		case "clients", "rate", "batch", "concurrency", "workers", "jobs", "fetch-max", "raw", "coalesce":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || (n == 0 && k != "rate" && k != "raw" && k != "coalesce") {
				return s, fmt.Errorf("workload %q: %s=%q is not a positive count", item, k, v)
			}
			switch k {
			case "clients":
				s.clients = []int{n}
			case "raw":
				sets = append(sets, func(_ *config, q *queueConfig) { q.raw = n != 0 })
			default:
				count := queueCounts[k]
				sets = append(sets, func(_ *config, q *queueConfig) { *count(q) = n })
			}
		default:
			return s, fmt.Errorf("workload %q: unknown setting %q", item, k)
		}
	}
	s.apply = func(cfg *config, q *queueConfig) {
		for _, set := range sets {
			set(cfg, q)
		}
	}
	// The limits main checks for the flags hold for the items too.
	var c config
	q := qcfg
	s.apply(&c, &q)
	if err := q.check(); err != nil {
		return s, fmt.Errorf("workload %q: %w", item, err)
	}
	return s, nil
}

func (q queueConfig) check() error {
	if q.batch < 1 || q.batch > 1000 || q.fetchMax < 1 || q.fetchMax > 1000 || q.delayMax < 2*time.Second {
		return fmt.Errorf("--queue-batch and --fetch-max are 1 to 1000, --delay-max at least 2s")
	}
	return nil
}
