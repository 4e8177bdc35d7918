//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// The job queue's histories: faultclient --mode qworker records, per
// attempt it runs, a "start" event and its fenced write ("jcommit" call and
// return), and with --raw-complete its own completion ("jcomplete"). The
// effect of job J is one FencedCommit to resource eff/J, fenced by the
// attempt's token, with the idempotency key job-J (or, for a schedule's
// job, occ/<schedule>/<occurrence ms>): an accepted commit that is not a
// duplicate is the effect happening.

// jrec mirrors the fields of faultclient.Record a job history uses.
type jrec struct {
	Kind      string `json:"kind"`
	Client    string `json:"client"`
	Seq       int64  `json:"seq"`
	Op        string `json:"op"`
	Resource  string `json:"resource"`
	Key       string `json:"key"`
	AtNs      int64  `json:"at_ns"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason"`
	Accepted  bool   `json:"accepted"`
	Duplicate bool   `json:"duplicate"`
	Job       uint64 `json:"job"`
	Attempt   uint32 `json:"attempt"`
	RunAtMs   int64  `json:"run_at_ms"`
	Sched     string `json:"sched"`
	OccMs     int64  `json:"occ_ms"`
	CtxDone   bool   `json:"ctx_done"`
	First     string `json:"first"`
}

// jop is a job call with its return (returned false: the process died
// before it returned, so the outcome is unknown).
type jop struct {
	call, ret jrec
	returned  bool
}

func (o *jop) ok() bool { return o.returned && o.ret.Outcome == "ok" }

// effect reports whether the call made the job's effect (accepted, not a
// duplicate of an earlier one).
func (o *jop) effect() bool { return o.ok() && o.ret.Accepted && !o.ret.Duplicate }

// jobLog reads the qworker histories of a run incrementally (they grow to
// hundreds of thousands of lines; a poll reads only what is new).
type jobLog struct {
	dir    string
	files  map[string]*tail
	starts []jrec
	ops    map[string]*jop // client/seq
	order  []*jop          // by call
	up     map[string]bool // workers that started
}

type tail struct {
	off  int64
	part []byte
}

func newJobLog(dir string) *jobLog {
	return &jobLog{dir: dir, files: map[string]*tail{}, ops: map[string]*jop{}, up: map[string]bool{}}
}

// refresh reads the lines appended since the last call.
func (l *jobLog) refresh(t testing.TB) *jobLog {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(l.dir, "*.jsonl"))
	for _, f := range files {
		tl := l.files[f]
		if tl == nil {
			tl = &tail{}
			l.files[f] = tl
		}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.Seek(tl.off, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(bufio.NewReader(fh))
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		tl.off += int64(len(b))
		b = append(tl.part, b...)
		last := bytes.LastIndexByte(b, '\n')
		tl.part = append([]byte(nil), b[last+1:]...)
		for _, line := range bytes.Split(b[:last+1], []byte{'\n'}) {
			var r jrec
			if len(line) == 0 || json.Unmarshal(line, &r) != nil {
				continue // a line cut by kill -9
			}
			l.add(r)
		}
	}
	return l
}

func (l *jobLog) add(r jrec) {
	switch {
	case r.Kind == "event" && r.Op == "start":
		l.starts = append(l.starts, r)
	case r.Kind == "event" && r.Op == "worker-up":
		l.up[r.Client] = true
	case r.Op == "jcommit" || r.Op == "jprobe" || r.Op == "jcomplete":
		k := fmt.Sprintf("%s/%d", r.Client, r.Seq)
		o := l.ops[k]
		if o == nil {
			o = &jop{}
			l.ops[k] = o
		}
		if r.Kind == "call" {
			o.call = r
			l.order = append(l.order, o)
		} else {
			o.ret, o.returned = r, true
		}
	}
}

// commits are the fenced writes (call order).
func (l *jobLog) commits() []*jop { return l.opsNamed("jcommit") }

func (l *jobLog) opsNamed(name string) []*jop {
	var out []*jop
	for _, o := range l.order {
		if o.call.Op == name {
			out = append(out, o)
		}
	}
	return out
}

// writer is the attempt whose write made the effect an accepted commit
// reports: its own, or for a duplicate the first one's (its payload is the
// first writer's token).
func (o *jop) writer() string {
	if o.ret.Duplicate {
		return o.ret.First
	}
	return fmt.Sprintf("job:%d:%d", o.call.Job, o.call.Attempt)
}

// effects counts, per job, the commits that made its effect (answered as
// first effects) and the attempts named as having made it (by first
// effects and by duplicates: a write whose answer was lost and whose retry
// was answered as its own duplicate counts there), and which jobs have any
// accepted commit.
func effects(commits []*jop) (made map[uint64]int, writers map[uint64]map[string]bool, done map[uint64]bool) {
	made, writers, done = map[uint64]int{}, map[uint64]map[string]bool{}, map[uint64]bool{}
	for _, o := range commits {
		if o.effect() {
			made[o.call.Job]++
		}
		if o.ok() && o.ret.Accepted {
			done[o.call.Job] = true
			if writers[o.call.Job] == nil {
				writers[o.call.Job] = map[string]bool{}
			}
			writers[o.call.Job][o.writer()] = true
		}
	}
	return made, writers, done
}

// checkJobEffects is the job queue's checker: every job of want (job id →
// its run_at in Unix ms as submitted) has its effect (an accepted fenced
// commit: none lost), no job and no idempotency key has more than one
// effect (no duplicate), and no attempt of a job of want started before
// its run_at minus skew (none early). It returns the violations.
func checkJobEffects(starts []jrec, commits []*jop, want map[uint64]int64, skew time.Duration) []string {
	var bad []string
	made, writers, done := effects(commits)
	for job, w := range writers {
		if len(w) > 1 {
			bad = append(bad, fmt.Sprintf("job %d: its effect was made by %d attempts %v", job, len(w), w))
		}
	}
	byKey := map[string][]uint64{}
	for _, o := range commits {
		if o.effect() {
			byKey[o.call.Key] = append(byKey[o.call.Key], o.call.Job)
		}
	}
	for job, n := range made {
		if n > 1 {
			bad = append(bad, fmt.Sprintf("job %d: its effect happened %d times", job, n))
		}
	}
	for key, jobs := range byKey {
		if len(jobs) > 1 {
			bad = append(bad, fmt.Sprintf("key %s: %d effects (jobs %v)", key, len(jobs), jobs))
		}
	}
	var lost []uint64
	for job := range want {
		if !done[job] {
			lost = append(lost, job)
		}
	}
	if len(lost) > 0 {
		sort.Slice(lost, func(i, j int) bool { return lost[i] < lost[j] })
		bad = append(bad, fmt.Sprintf("%d jobs without their effect (lost), e.g. %v", len(lost), lost[:min(len(lost), 10)]))
	}
	for _, s := range starts {
		runAt, ok := want[s.Job]
		if ok && runAt > 0 && s.AtNs < runAt*int64(time.Millisecond)-skew.Nanoseconds() {
			bad = append(bad, fmt.Sprintf("job %d attempt %d started on %s %s before its run_at", s.Job, s.Attempt, s.Client,
				time.Duration(runAt*int64(time.Millisecond)-s.AtNs)))
		}
	}
	sort.Strings(bad)
	return bad
}

// occurrence names one occurrence of a schedule.
type occurrence struct {
	sched string
	ms    int64
}

// checkOccurrences is the schedules' checker over the occurrences of
// every-second schedules in [fromMs, toMs): each is exactly one job (one
// job id among the attempts that ran for it) whose effect happened exactly
// once, or it is recorded as skipped (skipped returns the reason) and made
// no job. It returns the violations and, per occurrence that ran, the lag
// from the occurrence to the start of its first attempt.
func checkOccurrences(starts []jrec, commits []*jop, scheds []string, fromMs, toMs int64,
	skipped func(occurrence) string) (bad []string, lags []time.Duration) {
	jobsOf := map[occurrence]map[uint64]bool{}
	first := map[occurrence]int64{}
	for _, s := range starts {
		if s.Sched == "" {
			continue
		}
		o := occurrence{s.Sched, s.OccMs}
		if jobsOf[o] == nil {
			jobsOf[o] = map[uint64]bool{}
		}
		jobsOf[o][s.Job] = true
		if f, ok := first[o]; !ok || s.AtNs < f {
			first[o] = s.AtNs
		}
	}
	effectsOf := map[occurrence]int{}
	writersOf := map[occurrence]map[string]bool{}
	for _, c := range commits {
		if c.call.Sched == "" {
			continue
		}
		o := occurrence{c.call.Sched, c.call.OccMs}
		if c.effect() {
			effectsOf[o]++
		}
		if c.ok() && c.ret.Accepted {
			if writersOf[o] == nil {
				writersOf[o] = map[string]bool{}
			}
			writersOf[o][c.writer()] = true
		}
	}
	missing := 0
	for _, name := range scheds {
		for ms := fromMs; ms < toMs; ms += 1000 {
			o := occurrence{name, ms}
			reason := skipped(o)
			jobs := len(jobsOf[o])
			switch {
			case reason != "" && jobs > 0:
				bad = append(bad, fmt.Sprintf("%s@%d: recorded as skipped (%s) and made %d jobs", name, ms, reason, jobs))
			case reason != "":
			case jobs == 0:
				missing++
				if missing <= 10 {
					bad = append(bad, fmt.Sprintf("%s@%d: no job ran and not recorded as skipped (missing)", name, ms))
				}
			case jobs > 1:
				bad = append(bad, fmt.Sprintf("%s@%d: %d jobs for one occurrence", name, ms, jobs))
			case effectsOf[o] > 1 || len(writersOf[o]) != 1:
				// A write whose answer was lost is retried and answered as
				// its own duplicate: no first effect in the history, one
				// writer.
				bad = append(bad, fmt.Sprintf("%s@%d: its effect happened %d times (made by attempts %v)", name, ms,
					max(effectsOf[o], len(writersOf[o])), writersOf[o]))
			default:
				lags = append(lags, time.Duration(first[o]-ms*int64(time.Millisecond)))
			}
			if reason == "" && jobs == 1 && first[o] < ms*int64(time.Millisecond) {
				bad = append(bad, fmt.Sprintf("%s@%d: started %s early", name, ms, time.Duration(ms*int64(time.Millisecond)-first[o])))
			}
		}
	}
	if missing > 10 {
		bad = append(bad, fmt.Sprintf("%d occurrences missing in all", missing))
	}
	sort.Strings(bad)
	return bad, lags
}

// pct is the p-th percentile (0..100) of sorted durations.
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, len(d)*p/100)]
}

func lagSummary(lags []time.Duration) string {
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	if len(lags) == 0 {
		return "no starts"
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("%d starts: min %s, p50 %s, p99 %s, max %s", len(lags), r(lags[0]), r(pct(lags, 50)), r(pct(lags, 99)), r(lags[len(lags)-1]))
}

// TestJobCheckersCatchViolations shows the job checkers flagging doctored
// histories: a duplicate effect, a lost job, an early start, two jobs for
// one occurrence, a missing occurrence; and passing a clean one.
func TestJobCheckersCatchViolations(t *testing.T) {
	commit := func(job uint64, key string, effect, dup bool) *jop {
		return &jop{call: jrec{Op: "jcommit", Job: job, Attempt: 1, Key: key}, ret: jrec{Outcome: "ok", Accepted: effect || dup,
			Duplicate: dup, First: fmt.Sprintf("job:%d:1", job)}, returned: true}
	}
	refused := &jop{call: jrec{Op: "jcommit", Job: 1, Key: "job-1"}, ret: jrec{Outcome: "err", Reason: "STALE_TOKEN"}, returned: true}
	unknown := &jop{call: jrec{Op: "jcommit", Job: 2, Key: "job-2"}}
	sec := int64(time.Millisecond)
	starts := []jrec{{Job: 1, Attempt: 1, AtNs: 1000 * sec}, {Job: 2, Attempt: 1, AtNs: 2000 * sec}, {Job: 2, Attempt: 2, AtNs: 2500 * sec}}
	want := map[uint64]int64{1: 1000, 2: 2000}
	clean := []*jop{refused, commit(1, "job-1", true, false), unknown, commit(2, "job-2", false, true)}
	if bad := checkJobEffects(starts, clean, want, 0); len(bad) != 0 {
		t.Fatalf("a clean history flagged: %v", bad)
	}
	for name, c := range map[string]struct {
		starts  []jrec
		commits []*jop
	}{
		"duplicate effect":      {starts, append(clean[:len(clean):len(clean)], commit(1, "job-1", true, false))},
		"second effect per key": {starts, append(clean[:len(clean):len(clean)], commit(3, "job-1", true, false))},
		"lost job":              {starts, clean[:2]},
		"two writers":           {starts, append(clean[:len(clean):len(clean)], &jop{call: jrec{Op: "jcommit", Job: 2, Attempt: 2, Key: "job-2"}, ret: jrec{Outcome: "ok", Accepted: true, Duplicate: true, First: "job:2:2"}, returned: true})},
		"early start":           {append(starts[:len(starts):len(starts)], jrec{Job: 2, Attempt: 3, AtNs: 1999 * sec}), clean},
	} {
		if bad := checkJobEffects(c.starts, c.commits, want, 0); len(bad) == 0 {
			t.Errorf("%s: not flagged", name)
		} else {
			t.Logf("%s: %v", name, bad)
		}
	}

	occStart := func(job uint64, ms int64) jrec {
		return jrec{Job: job, Attempt: 1, Sched: "s", OccMs: ms, AtNs: ms*sec + 5*sec}
	}
	occCommit := func(job uint64, ms int64, effect bool) *jop {
		k := fmt.Sprintf("occ/s/%d", ms)
		return &jop{call: jrec{Op: "jcommit", Job: job, Attempt: 1, Sched: "s", OccMs: ms, Key: k},
			ret: jrec{Outcome: "ok", Accepted: true, Duplicate: !effect, First: fmt.Sprintf("job:%d:1", job)}, returned: true}
	}
	noSkips := func(occurrence) string { return "" }
	skip3 := func(o occurrence) string {
		if o.ms == 3000 {
			return "DEADLINE"
		}
		return ""
	}
	occStarts := []jrec{occStart(1, 1000), occStart(2, 2000), occStart(4, 4000)}
	oc := []*jop{occCommit(1, 1000, true), occCommit(2, 2000, true), occCommit(4, 4000, true)}
	if bad, lags := checkOccurrences(occStarts, oc, []string{"s"}, 1000, 5000, skip3); len(bad) != 0 || len(lags) != 3 {
		t.Fatalf("a clean schedule history flagged: %v (%d lags)", bad, len(lags))
	}
	for name, c := range map[string]struct {
		starts  []jrec
		commits []*jop
		skipped func(occurrence) string
	}{
		"missing occurrence":       {occStarts, oc, noSkips},
		"two jobs, one occurrence": {append(occStarts[:3:3], occStart(5, 2000)), append(oc[:3:3], occCommit(5, 2000, false)), skip3},
		"second effect":            {occStarts, append(oc[:3:3], occCommit(1, 1000, true)), skip3},
		"skipped and made":         {append(occStarts[:3:3], occStart(6, 3000)), append(oc[:3:3], occCommit(6, 3000, true)), skip3},
		"early":                    {append(occStarts[:3:3], jrec{Job: 7, Sched: "s", OccMs: 3000, AtNs: 2999 * sec}), append(oc[:3:3], occCommit(7, 3000, true)), noSkips},
	} {
		if bad, _ := checkOccurrences(c.starts, c.commits, []string{"s"}, 1000, 5000, c.skipped); len(bad) == 0 {
			t.Errorf("%s: not flagged", name)
		} else {
			t.Logf("%s: %v", name, bad)
		}
	}
}
