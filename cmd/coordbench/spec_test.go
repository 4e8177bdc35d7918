package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseWorkloadSpec(t *testing.T) {
	s, err := parseWorkloadSpec("queue:rate=100:duration=30s:clients=4:batch=500:jobs=7:delay-max=10s:warmup=0s:concurrency=3:workers=2:fetch-max=9:raw=1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config{duration: time.Second, warmup: time.Second}
	q := qcfg
	s.apply(&cfg, &q)
	if s.name != "queue" || s.raw == "" || len(s.clients) != 1 || s.clients[0] != 4 {
		t.Fatalf("spec %+v", s)
	}
	if cfg.duration != 30*time.Second || cfg.warmup != 0 || q.rate != 100 || q.batch != 500 || q.delayed != 7 || q.delayMax != 10*time.Second ||
		q.concurrency != 3 || q.workers != 2 || q.fetchMax != 9 || !q.raw {
		t.Fatalf("applied: cfg %+v, queue %+v", cfg, q)
	}
	if qcfg.rate != 0 || qcfg.batch != 1000 {
		t.Fatalf("parsing changed the flags' config: %+v", qcfg)
	}

	plain, err := parseWorkloadSpec("acquire-release")
	if err != nil || plain.raw != "" || plain.clients != nil {
		t.Fatalf("plain item: %+v, %v", plain, err)
	}
	plain.apply(&cfg, &q) // changes nothing
	if cfg.duration != 30*time.Second {
		t.Fatal("a plain item changed the config")
	}

	for item, want := range map[string]string{
		"nope":                       "unknown workload",
		"queue:rate":                 "not key=value",
		"queue:speed=3":              "unknown setting",
		"queue:clients=0":            "not a positive count",
		"queue:rate=-1":              "not a positive count",
		"queue:duration=0s":          "not a positive duration",
		"queue:duration=x":           "not a positive duration",
		"queue:batch=1001":           "1 to 1000",
		"queue-delayed:delay-max=1s": "at least 2s",
	} {
		if _, err := parseWorkloadSpec(item); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", item, err, want)
		}
	}
}
