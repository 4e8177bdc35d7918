package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/internal/apijson"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/pbtime"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// protoJSON renders msg as the HTTP API writes it (internal/apijson: the
// proto field names, RFC 3339 times, "90s" durations, args and results as
// JSON, short enum names, 64-bit integers as strings), indented by two
// spaces or, with indent false, on one line. Formatting goes through
// encoding/json, so it is the same for every document (protojson varies
// its whitespace on purpose).
func protoJSON(msg proto.Message, indent bool) ([]byte, error) {
	b, err := apijson.Marshal(msg)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if indent {
		err = json.Indent(&buf, b, "", "  ")
	} else {
		err = json.Compact(&buf, b)
	}
	return buf.Bytes(), err
}

// print writes msg as one JSON document (-o json) or renders table.
func (a *app) print(msg proto.Message, table func(w io.Writer)) error {
	if a.output == "json" {
		return a.writeJSON(msg, true)
	}
	table(a.out)
	return nil
}

// writeJSON writes msg as one JSON document (see protoJSON) and a
// newline.
func (a *app) writeJSON(msg proto.Message, indent bool) error {
	b, err := protoJSON(msg, indent)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.out, "%s\n", b)
	return err
}

// reply prints resp as print does, or returns the failure of op.
func (a *app) reply(op string, resp proto.Message, err error, table func(w io.Writer)) error {
	if err != nil {
		return fail(op, err)
	}
	return a.print(resp, table)
}

// noteIf heads table with a line, note, when cond holds.
func noteIf(cond bool, note string, table func(w io.Writer)) func(w io.Writer) {
	return func(w io.Writer) {
		if cond {
			fmt.Fprintln(w, note)
		}
		table(w)
	}
}

// morePages says how to ask for the next page, when there is one.
func morePages(w io.Writer, resp interface{ GetNextPageToken() string }) {
	if t := resp.GetNextPageToken(); t != "" {
		fmt.Fprintf(w, "\nmore: --page-token %s\n", t)
	}
}

// section prints, after a blank line, a table of items under head, cells
// giving each item's row; nothing when there are no items.
func section[T any](out io.Writer, items []T, head []any, cells func(T) []any) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintln(out)
	tab(out, func(w io.Writer) {
		row(w, head...)
		for _, x := range items {
			row(w, cells(x)...)
		}
	})
}

// tab runs f on an aligned table writer.
func tab(out io.Writer, f func(w io.Writer)) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	f(tw)
	tw.Flush()
}

func row(w io.Writer, cols ...any) {
	s := make([]string, len(cols))
	for i, c := range cols {
		s[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(w, strings.Join(s, "\t"))
}

// human renders a duration in milliseconds the way people read it: 850ms,
// 4.2s, 1m30s, 2h5m, 9d4h. A duration here is an age, a time left or an
// interval: a negative one (clock skew between nodes) is shown as 0ms.
func human(ms int64) string {
	ms = max(ms, 0)
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", ms)
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// leaseState is a lease's state (released, expired or held) and, when it
// is held, the time it has left ("-" otherwise).
func leaseState(l *coordv1.Lease) (state, left string) {
	switch {
	case l.GetReleased():
		return "released", "-"
	case l.GetExpired():
		return "expired", "-"
	default:
		return "held", human(l.GetExpiresInMs())
	}
}

// leaseTable shows leases; with TLS (leases bound to identities) it has an
// IDENTITY column: who may renew and release each one.
func leaseTable(out io.Writer, leases []*coordv1.Lease) {
	identities := false
	for _, l := range leases {
		identities = identities || l.GetIdentity() != ""
	}
	tab(out, func(w io.Writer) {
		head := []any{"NAME", "OWNER", "GENERATION", "STATE", "AGE", "RENEWED", "EXPIRES IN"}
		if identities {
			head = append(head[:2:2], append([]any{"IDENTITY"}, head[2:]...)...)
		}
		row(w, head...)
		for _, l := range leases {
			state, left := leaseState(l)
			cells := []any{l.GetName(), l.GetOwner(), l.GetGeneration(), state, human(l.GetHeldMs()),
				agoMs(l.GetRenewedAgoMs()), left}
			if identities {
				cells = append(cells[:2:2], append([]any{or(l.GetIdentity(), "-")}, cells[2:]...)...)
			}
			row(w, cells...)
		}
	})
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func windowState(w *coordv1.Window) string {
	if w.GetState() == coordv1.WindowState_WINDOW_STATE_COMPLETED {
		return "completed"
	}
	return "incomplete"
}

// windowTable shows windows; now is calendar time, to render ages.
func windowTable(out io.Writer, ws []*coordv1.Window, now int64) {
	tab(out, func(w io.Writer) {
		row(w, "JOB", "WINDOW", "STATE", "ATTEMPTS", "OWNER", "GENERATION", "STARTED", "COMPLETED", "RESULT")
		for _, x := range ws {
			completed := "-"
			if x.GetCompletedAt() != nil {
				completed = ago(now, x.GetCompletedAtMs())
			}
			row(w, x.GetJob(), x.GetWindow(), windowState(x), x.GetAttempts(), x.GetOwner(), x.GetGeneration(),
				ago(now, x.GetStartedAtMs()), completed, short(string(x.GetResult()), 40))
		}
	})
}

// ago renders the time at as seen at now (both Unix ms), "-" if either is
// unknown.
func ago(now, at int64) string {
	if at == 0 || now == 0 {
		return "-"
	}
	return agoMs(now - at)
}

// agoMs renders a time ms before now: "1.2s ago". A time after now (the
// clocks of two nodes differ) reads "in 152ms", never "-152ms ago".
func agoMs(ms int64) string {
	if ms < 0 {
		return "in " + human(-ms)
	}
	return human(ms) + " ago"
}

// short cuts s to n bytes or so, "…" marking the cut (never inside a
// UTF-8 character); "-" for "".
func short(s string, n int) string {
	if s == "" {
		return "-"
	}
	if len(s) > n {
		return coorderr.Truncate(s, n-1) + "…"
	}
	return s
}

// firstLine is the first line of a (multi-line) error text such as a
// panic's stack, cut to n bytes; "-" for "".
func firstLine(s string, n int) string {
	first, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return short(strings.TrimSpace(first), n)
}

func resourceTable(out io.Writer, r *coordv1.Resource, now int64) { // now: calendar time
	tab(out, func(w io.Writer) {
		row(w, "RESOURCE", "LEASE", "MAX GENERATION", "COMMITS", "LAST COMMIT", "LAST KEY")
		row(w, r.GetResource(), r.GetLeaseName(), r.GetMaxGeneration(), r.GetCommits(), ago(now, r.GetLastCommitAtMs()),
			short(r.GetLastIdempotencyKey(), 48))
	})
}

// nodeStatus is one endpoint's answer to Status.
type nodeStatus struct {
	endpoint string
	status   *coordv1.StatusResponse
	err      error
}

// statusTable shows every endpoint's status. CLOCK OFFSET is the node's
// wall clock minus the leader's (± the measurement's bound), as the leader
// measured it; LEASE LAG is how far lease time trails calendar time. A
// leader that does not reach a majority is "Leader (no majority)", and
// the lines after the table say why (noMajority).
func statusTable(out io.Writer, nodes []nodeStatus) {
	byID, warnings := noMajority(nodes)
	// The leader's measurements are the freshest; a node's own is the
	// leader's previous one.
	offsets := map[string]*coordv1.ClockOffset{}
	for _, n := range nodes {
		if n.err == nil {
			for _, o := range n.status.GetClockOffsets() {
				offsets[o.GetId()] = o
			}
		}
	}
	tab(out, func(w io.Writer) {
		row(w, "ENDPOINT", "ID", "STATE", "LEADER", "TERM", "COMMIT", "APPLIED", "LAST CONTACT", "CLOCK OFFSET", "LEASE LAG", "DIGEST")
		for _, n := range nodes {
			if n.err != nil {
				row(w, n.endpoint, "-", "unreachable", "-", "-", "-", "-", "-", "-", "-", describe(n.err))
				continue
			}
			s := n.status
			contact := "-"
			switch lc := s.GetLastContact(); {
			case s.GetState() == "Leader":
				contact = "-"
			case lc == nil:
				contact = "never"
			default:
				contact = agoMs(s.GetLastContactMs())
			}
			o := offsets[s.GetId()]
			if o == nil {
				o = s.GetClockOffset()
			}
			lag := "-"
			if s.GetCalendarTimeMs() > 0 {
				lag = signedMs(s.GetLeaseClockLagMs())
			}
			state := s.GetState()
			if _, ok := byID[s.GetId()]; ok && state == "Leader" {
				state = "Leader (no majority)"
			}
			row(w, n.endpoint, s.GetId(), state, s.GetLeaderId(), s.GetTerm(), s.GetCommitIndex(), s.GetAppliedIndex(),
				contact, clockOffset(o), lag, short(s.GetFsmDigest(), 12))
		}
	})
	for _, msg := range warnings {
		fmt.Fprintf(out, "\nwarning: %s\n", msg)
	}
}

// noMajority finds the nodes that say they lead but do not reach a
// majority of the members, by id, with the explanation (also in the
// endpoints' order, ordered): such a leader commits nothing (writes fail
// with LEADERSHIP_LOST or TIMEOUT, their outcome unknown) until a majority
// is back or it steps down. The evidence is the leader's own, its last
// probe of each member (the clock offsets, every few seconds), and
// coordctl's: how many of the endpoints answered it (a leader keeps its
// state for a moment after losing the others, before a probe fails). When
// no node that answered leads or knows a leader, that is said too.
func noMajority(nodes []nodeStatus) (byID map[string]string, ordered []string) {
	out := map[string]string{}
	answered, leaderKnown := 0, false
	for _, n := range nodes {
		if n.err == nil {
			answered++
			leaderKnown = leaderKnown || n.status.GetLeaderId() != ""
		}
	}
	for _, n := range nodes {
		s := n.status
		if n.err != nil || s.GetState() != "Leader" {
			continue
		}
		cant := func(reach, of int, evidence string) {
			msg := fmt.Sprintf("%s is Leader but only %d of %d %s: without a majority (%d) it cannot commit "+
				"anything; writes fail or time out (LEADERSHIP_LOST, TIMEOUT: their outcome unknown) until a majority is back",
				s.GetId(), reach, of, evidence, of/2+1)
			out[s.GetId()], ordered = msg, append(ordered, msg)
		}
		offs := s.GetClockOffsets()
		var down []string
		for _, o := range offs {
			if o.GetError() != "" {
				down = append(down, o.GetId()+": "+dialProblem(o.GetError()))
			}
		}
		switch {
		case len(offs) > 0 && len(offs)-len(down) <= len(offs)/2:
			cant(len(offs)-len(down), len(offs), "members answered its last probe (itself included; "+strings.Join(down, ", ")+")")
		case answered <= len(nodes)/2:
			cant(answered, len(nodes), "endpoints answered coordctl (if they are all the members)")
		}
	}
	if answered > 0 && !leaderKnown {
		ordered = append(ordered, fmt.Sprintf("no node that answered leads or knows a leader (%d of %d endpoints answered): "+
			"nothing can commit until a majority of the members elects one; writes wait for it up to --timeout (NO_LEADER)",
			answered, len(nodes)))
	}
	return out, ordered
}

// clockOffset renders a measured offset: "+2.99s ±20ms", "0" for the
// leader itself, "-" when not measured.
func clockOffset(o *coordv1.ClockOffset) string {
	switch {
	case o == nil || o.GetMeasuredAtMs() == 0:
		return "-"
	case pbtime.Duration(o.GetOffset()) == 0 && pbtime.Duration(o.GetOffsetError()) == 0:
		return "0"
	}
	s := signedDuration(pbtime.Duration(o.GetOffset())) + " ±" +
		roundDuration(pbtime.Duration(o.GetOffsetError())).String()
	if o.GetError() != "" {
		s += " (last probe failed)"
	}
	return s
}

// signedMs renders milliseconds with their sign ("46s", "-1.2s").
func signedMs(ms int64) string {
	if ms < 0 {
		return "-" + human(-ms)
	}
	return human(ms)
}

// signedDuration renders d with a sign, rounded to three significant
// figures or so ("+3.01s", "-200ms", "+412µs").
func signedDuration(d time.Duration) string {
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	return sign + roundDuration(d).String()
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

func membersTable(out io.Writer, ms []*coordv1.Member) {
	tab(out, func(w io.Writer) {
		row(w, "ID", "RAFT ADDRESS", "GRPC ADDRESS", "SUFFRAGE", "LEADER")
		for _, m := range ms {
			leader := ""
			if m.GetLeader() {
				leader = "*"
			}
			row(w, m.GetId(), m.GetRaftAddress(), m.GetGrpcAddress(), m.GetSuffrage(), leader)
		}
	})
}
