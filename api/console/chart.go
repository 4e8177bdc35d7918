package console

import (
	"fmt"
	"html/template"
	"sort"
	"strings"
	"sync"
	"time"
)

// The queues page's chart: jobs succeeded and attempts failed per sample
// interval (a minute) over the last hour, from a bounded ring of samples
// of this node's queue counters. Nothing is stored in the cluster; a node
// that restarts starts an empty chart.

// ChartPoints is the number of samples the ring keeps (an hour of minutes
// and the sample before it).
const ChartPoints = 61

// maxChartQueues bounds the queues a sample keeps by name (the rest are
// summed under otherQueues), as the metrics do.
const (
	maxChartQueues = 100
	otherQueues    = "_other"
)

type sample struct {
	at     time.Time
	queues map[string]Counters
}

// ring is a fixed-size ring of samples, oldest first.
type ring struct {
	mu      sync.Mutex
	samples []sample
	size    int
}

func newRing(size int) *ring { return &ring{size: size} }

// add records the counters at time at.
func (r *ring) add(at time.Time, counters map[string]Counters) {
	names := make([]string, 0, len(counters))
	for n := range counters {
		names = append(names, n)
	}
	sort.Strings(names)
	q := make(map[string]Counters, min(len(names), maxChartQueues+1))
	for i, n := range names {
		key := n
		if i >= maxChartQueues {
			key = otherQueues
		}
		c := q[key]
		c.Succeeded += counters[n].Succeeded
		c.Failures += counters[n].Failures
		q[key] = c
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, sample{at: at, queues: q})
	if len(r.samples) > r.size {
		r.samples = append(r.samples[:0], r.samples[len(r.samples)-r.size:]...)
	}
}

// point is one interval of the chart.
type point struct {
	End                 time.Time
	Succeeded, Failures uint64
}

// delta of a counter between samples; a counter that went down restarted
// (the node restarted or installed a snapshot): count from zero.
func delta(prev, cur uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// series returns the per-interval totals over all queues, oldest first,
// and per queue the sums over the whole ring.
func (r *ring) series() ([]point, map[string]Counters) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var pts []point
	sums := map[string]Counters{}
	for i := 1; i < len(r.samples); i++ {
		prev, cur := r.samples[i-1], r.samples[i]
		p := point{End: cur.at}
		for name, c := range cur.queues {
			pc := prev.queues[name]
			ds, df := delta(pc.Succeeded, c.Succeeded), delta(pc.Failures, c.Failures)
			p.Succeeded += ds
			p.Failures += df
			s := sums[name]
			s.Succeeded += ds
			s.Failures += df
			sums[name] = s
		}
		pts = append(pts, p)
	}
	return pts, sums
}

// Run samples the queue counters every SampleInterval until stop is
// closed (or Close is called).
func (c *Console) Run(stop <-chan struct{}) {
	if c.b.Counters == nil {
		return
	}
	c.ring.add(c.cfg.Clock.Now(), c.b.Counters())
	t := c.cfg.Clock.NewTicker(c.cfg.SampleInterval)
	defer t.Stop()
	for {
		select {
		case now := <-t.C():
			c.ring.add(now, c.b.Counters())
		case <-stop:
			return
		case <-c.stop:
			return
		}
	}
}

// chartSVG draws the points as an inline SVG bar chart: succeeded (up)
// and failures (down) per interval, newest on the right.
func chartSVG(pts []point, slots int, interval time.Duration) template.HTML {
	const w, h, pad = 720, 160, 28
	mid := float64(h) / 2
	var maxS, maxF uint64
	for _, p := range pts {
		maxS, maxF = max(maxS, p.Succeeded), max(maxF, p.Failures)
	}
	scale := max(maxS, maxF, 1)
	bw := float64(w-2*pad) / float64(max(slots, 1))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="jobs succeeded and failed per %s over the last %s">`,
		w, h, w, h, durMs(interval.Milliseconds()), durMs(int64(slots)*interval.Milliseconds()))
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, pad, mid, w-pad, mid)
	off := slots - len(pts) // the newest point is the rightmost slot
	for i, p := range pts {
		x := float64(pad) + float64(off+i)*bw
		if p.Succeeded > 0 {
			bh := (mid - 12) * float64(p.Succeeded) / float64(scale)
			fmt.Fprintf(&b, `<rect class="ok" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d succeeded</title></rect>`,
				x, mid-bh, max(bw-1, 1), bh, p.End.UTC().Format("15:04"), p.Succeeded)
		}
		if p.Failures > 0 {
			bh := (mid - 12) * float64(p.Failures) / float64(scale)
			fmt.Fprintf(&b, `<rect class="bad" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d failed</title></rect>`,
				x, mid, max(bw-1, 1), bh, p.End.UTC().Format("15:04"), p.Failures)
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="12">%d succeeded / %s (max)</text>`, pad, maxS, durMs(interval.Milliseconds()))
	fmt.Fprintf(&b, `<text x="%d" y="%d">%d failed / %s (max)</text>`, pad, h-4, maxF, durMs(interval.Milliseconds()))
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">now</text>`, w-pad, h-4)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // numbers and fixed text only
}
