package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// funcs are the templates' helpers: times are shown in UTC, durations
// rounded for reading.
var funcs = template.FuncMap{
	"ts":          ts,
	"dur":         durMs,
	"rel":         rel,
	"jobState":    jobState,
	"bulkAction":  bulkAction,
	"windowState": windowState,
	"sub":         func(a, b int64) int64 { return a - b },
	"bulkFilter":  bulkFilter,
	"outcome":     outcome,
	"skipReason":  skipReason,
	"payload":     payload,
	"labels":      sortedKeys,
	"kinds":       kindLimits,
	"offset":      offsetUs,
	"leaseState":  leaseState,
	"overlap": func(o coordv1.ScheduleOverlap) string {
		return strings.ToLower(strings.TrimPrefix(o.String(), "SCHEDULE_OVERLAP_"))
	},
	"hour": func(m map[string]Counters, q string) Counters { return m[q] },
}

// ts formats Unix ms as UTC ("—" for 0).
func ts(ms int64) string {
	if ms == 0 {
		return "—"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05Z")
}

// durMs formats a duration in ms for reading: 850ms, 12.3s, 4m10s, 3h5m, 2d4h.
func durMs(ms int64) string {
	neg := ms < 0
	if neg {
		ms = -ms
	}
	d := time.Duration(ms) * time.Millisecond
	var s string
	switch {
	case d < time.Second:
		s = fmt.Sprintf("%dms", ms)
	case d < time.Minute:
		s = fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		s = fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
	if neg {
		return "-" + s
	}
	return s
}

// rel says when at is relative to now: "in 4m10s" or "4m10s ago".
func rel(now, at int64) string {
	if at == 0 {
		return "—"
	}
	if at >= now {
		return "in " + durMs(at-now)
	}
	return durMs(now-at) + " ago"
}

func jobState(s coordv1.JobState) string {
	if s == coordv1.JobState_JOB_STATE_UNSPECIFIED {
		return "—"
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_"))
}

func outcome(o coordv1.AttemptOutcome) string {
	return strings.ToLower(strings.TrimPrefix(o.String(), "ATTEMPT_OUTCOME_"))
}

func skipReason(r coordv1.ScheduleSkipReason) string {
	if r == coordv1.ScheduleSkipReason_SCHEDULE_SKIP_REASON_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(r.String(), "SCHEDULE_SKIP_REASON_"))
}

// payload shows bytes: indented JSON when they are JSON, text when UTF-8,
// else hex.
func payload(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	var out bytes.Buffer
	if json.Valid(b) && json.Indent(&out, b, "", "  ") == nil {
		return out.String()
	}
	if utf8.Valid(b) {
		return string(b)
	}
	return fmt.Sprintf("(%d bytes) %x", len(b), b)
}

// offsetUs formats a clock offset in µs as ms with its error bound.
func offsetUs(o *coordv1.ClockOffset) string {
	if o == nil || o.GetMeasuredAtMs() == 0 {
		return "—"
	}
	return fmt.Sprintf("%+.3f ms ± %.3f", float64(o.GetOffset().AsDuration().Microseconds())/1000, float64(o.GetOffsetError().AsDuration().Microseconds())/1000)
}

func leaseState(l *coordv1.Lease) string {
	switch {
	case l.GetReleased():
		return "released"
	case l.GetExpired() || l.GetExpiresInMs() == 0:
		return "expired"
	default:
		return "held"
	}
}

// bulkAction is a bulk operation's action as shown: "retry".
func bulkAction(a coordv1.BulkAction) string {
	return strings.ToLower(strings.TrimPrefix(a.String(), "BULK_ACTION_"))
}

// bulkFilter is a bulk operation's filter as shown: "queue=billing state=dead".
func bulkFilter(f *coordv1.JobFilter) string {
	var parts []string
	for _, p := range [][2]string{{"queue", f.GetQueue()}, {"kind", f.GetKind()}, {"label", f.GetLabel()}} {
		if p[1] != "" {
			parts = append(parts, p[0]+"="+p[1])
		}
	}
	if s := f.GetState(); s != coordv1.JobState_JOB_STATE_UNSPECIFIED {
		parts = append(parts, "state="+jobState(s))
	}
	if t := f.GetCreatedAfterMs(); t != 0 {
		parts = append(parts, "since "+ts(t))
	}
	if t := f.GetCreatedBeforeMs(); t != 0 {
		parts = append(parts, "until "+ts(t))
	}
	if n := len(f.GetIds()); n > 0 {
		parts = append(parts, strconv.Itoa(n)+" ids")
	}
	if len(parts) == 0 {
		return "every job"
	}
	return strings.Join(parts, " ")
}

// kindLimits formats per-kind concurrency limits as "a: 2, b: 3" in kind
// order ("" for none).
func kindLimits(m map[string]uint32) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = k + ": " + strconv.FormatUint(uint64(m[k]), 10)
	}
	return strings.Join(parts, ", ")
}
