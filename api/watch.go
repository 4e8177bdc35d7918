package api

import (
	"errors"
	"strings"

	"github.com/coordd/coordd/internal/metriclabel"
	"github.com/coordd/coordd/internal/pbtime"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/auth"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// watchService implements coord.v1.Watch: any node serves it from its own
// applied state (Node.Watch); this side validates, authorizes the prefix,
// filters, converts and sends. See DESIGN.md "Watch".
type watchService struct {
	coordv1.UnimplementedWatchServer
	s       *Server
	streams prometheus.Gauge
	events  prometheus.Counter
	ended   *prometheus.CounterVec
}

func newWatchService(s *Server) *watchService {
	w := &watchService{s: s,
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coordd_watch_streams", Help: "Open Watch streams on this node."}),
		events:  prometheus.NewCounter(prometheus.CounterOpts{Name: "coordd_watch_events_sent_total", Help: "Change events sent to watchers (initial records included)."}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coordd_watch_ended_total",
			Help: "Watch streams ended, by reason (watcher_too_slow, index_compacted, ..., or closed by the client)."}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{w.streams, w.events, w.ended} {
		if err := s.cfg.Metrics.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(err)
			}
		}
	}
	return w
}

// Limits of one message of the initial set (the node bounds the others
// alike).
const (
	watchChunkEvents = 512
	watchChunkBytes  = 1 << 20
)

// watchCodes maps the node's watch refusals to codes.
var watchCodes = map[coorderr.Reason]codes.Code{
	coorderr.WatchIndexCompacted: codes.FailedPrecondition,
	coorderr.WatcherTooSlow:      codes.ResourceExhausted,
	coorderr.WatchLimit:          codes.ResourceExhausted,
}

// watchRefusedErr is a watch the node cannot serve (node/watch.go).
type watchRefusedErr interface {
	WatchRefused() (coorderr.Reason, map[string]string)
}

// watchStatus turns a watch refusal into its status.
func watchStatus(err error) (error, bool) {
	var wr watchRefusedErr
	if !errors.As(err, &wr) {
		return nil, false
	}
	reason, meta := wr.WatchRefused()
	code, ok := watchCodes[reason]
	if !ok {
		code = codes.FailedPrecondition
	}
	return withInfo(code, err.Error(), reason, meta), true
}

// checkWatch validates a request and returns the families it wants.
func checkWatch(req *coordv1.WatchRequest) (map[fsm.Family]bool, error) {
	if len(req.GetPrefix()) > MaxNameBytes {
		return nil, invalidArg("prefix", "is %d bytes; the limit is %d", len(req.GetPrefix()), MaxNameBytes)
	}
	if err := checkName("prefix", req.GetPrefix(), false); err != nil {
		return nil, err
	}
	if req.GetInitial() && req.GetStartIndex() != 0 {
		return nil, invalidArg("initial", "the initial set is read now: it needs start_index 0")
	}
	if req.GetStartIndex() == 0 && req.GetStartPosition() != 0 {
		return nil, invalidArg("start_position", "needs a start_index")
	}
	fams := map[fsm.Family]bool{}
	for _, f := range req.GetFamilies() {
		if _, ok := coordv1.WatchFamily_name[int32(f)]; !ok || f == coordv1.WatchFamily_WATCH_FAMILY_UNSPECIFIED {
			return nil, invalidArg("families", "unknown family %d", f)
		}
		fams[f] = true
	}
	if len(fams) == 0 {
		for v := range coordv1.WatchFamily_name {
			if v != 0 {
				fams[fsm.Family(v)] = true
			}
		}
	}
	for _, st := range req.GetJobStates() {
		if _, ok := coordv1.JobState_name[int32(st)]; !ok || st == coordv1.JobState_JOB_STATE_UNSPECIFIED {
			return nil, invalidArg("job_states", "unknown job state %d", st)
		}
	}
	if err := checkName("job_worker_id", req.GetJobWorkerId(), false); err != nil {
		return nil, err
	}
	return fams, nil
}

// watchFilter is what a watch sends: its families and prefix, and for
// queued jobs the states and worker asked for (job_states, job_worker_id).
func watchFilter(req *coordv1.WatchRequest, fams map[fsm.Family]bool) func(f fsm.Family, key string, rec any) bool {
	prefix, worker := req.GetPrefix(), req.GetJobWorkerId()
	var states map[fsm.JobState]bool
	if len(req.GetJobStates()) > 0 {
		states = map[fsm.JobState]bool{}
		for _, st := range req.GetJobStates() {
			states[fsm.JobState(st)] = true
		}
	}
	return func(f fsm.Family, key string, rec any) bool {
		if !fams[f] || !strings.HasPrefix(key, prefix) {
			return false
		}
		j, ok := rec.(*fsm.QueueJob)
		if !ok || (states == nil && worker == "") {
			return true
		}
		if states != nil && !states[j.State] {
			return false
		}
		return worker == "" || (len(j.Log) > 0 && j.Log[len(j.Log)-1].WorkerID == worker)
	}
}

// authorizeWatch authorizes a watch of prefix: read on it (as a list); or,
// for a watch of queued jobs only, work on it — a worker may fetch those
// queues' jobs anyway, and the SDK's Worker watches them for its attempts'
// cancellations.
func (s *Server) authorizeWatch(c auth.Caller, prefix string, fams map[fsm.Family]bool) error {
	if len(fams) == 1 && fams[fsm.FamilyQueueJob] && s.allowed(c, auth.OpWork, prefix, true) {
		return nil
	}
	return s.authorize(c, auth.OpRead, prefix, true)
}

// Watch streams the changes of records under a prefix (see watch.proto).
func (w *watchService) Watch(req *coordv1.WatchRequest, stream coordv1.Watch_WatchServer) error {
	s := w.s
	ctx := stream.Context()
	fams, err := checkWatch(req)
	if err != nil {
		return toStatus(err)
	}
	if err := s.authorizeWatch(auth.CallerOf(ctx), req.GetPrefix(), fams); err != nil {
		return toStatus(err)
	}
	w.streams.Inc()
	defer w.streams.Dec()
	keep := watchFilter(req, fams)
	match := func(e *fsm.Event) bool { return keep(e.Family, e.Key, e.Record) }
	send := func(b fsm.WatchBatch) error {
		if b.View != nil {
			return w.sendInitial(stream, b, req.GetPrefix(), fams, match)
		}
		return w.send(stream, b.Events, b.Next, true)
	}
	from := fsm.Position{Index: req.GetStartIndex(), Offset: req.GetStartPosition()}
	err = s.node.Watch(ctx, from, req.GetInitial(), match, send)
	st := toStatus(err)
	if ctx.Err() != nil {
		w.ended.WithLabelValues("closed").Inc()
		return st
	}
	_, info := coorderr.Info(st)
	reason := "other"
	if r := info.GetReason(); r != "" {
		reason = metriclabel.Value(r, "WATCH_")
	}
	w.ended.WithLabelValues(reason).Inc()
	return st
}

// send writes one message. The events' encodings are made once per event
// and node (LogEvent.Encoded) and placed in the message as they are: a
// WatchResponse's repeated events field on the wire is the concatenation
// of its elements, so the message is built from the shared bytes without
// encoding anything per watcher.
func (w *watchService) send(stream coordv1.Watch_WatchServer, evs []*fsm.LogEvent, next fsm.Position, synced bool) error {
	resp := &coordv1.WatchResponse{ResumeIndex: next.Index, ResumePosition: next.Offset, Synced: synced}
	if len(evs) > 0 {
		n := 0
		encs := make([][]byte, len(evs))
		for i, e := range evs {
			encs[i] = e.Encoded(w.encode)
			n += len(encs[i])
		}
		raw := make([]byte, 0, n)
		for _, b := range encs {
			raw = append(raw, b...)
		}
		resp.ProtoReflect().SetUnknown(raw)
		w.events.Add(float64(len(evs)))
	}
	return stream.Send(resp)
}

// encode is an event's encoding as one element of WatchResponse.events
// (field tag and length included).
func (w *watchService) encode(e *fsm.LogEvent) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(w.s.eventToProto(e.Event, e.Index, e.Offset))
	if err != nil {
		panic(err) // a message of ours always encodes
	}
	out := protowire.AppendTag(make([]byte, 0, len(b)+8), 1, protowire.BytesType)
	return protowire.AppendBytes(out, b)
}

// sendInitial sends the records of the View as EXISTING events (index: the
// applied index the View is at; positions count the set), in messages of
// bounded size, the last one marked synced.
func (w *watchService) sendInitial(stream coordv1.Watch_WatchServer, b fsm.WatchBatch, prefix string, fams map[fsm.Family]bool,
	match func(*fsm.Event) bool) error {
	index := b.Next.Index - 1
	var (
		chunk []*fsm.LogEvent
		size  int
		pos   uint32
		err   error
	)
	b.View.Records(prefix, func(f fsm.Family) bool { return fams[f] }, func(e fsm.Event) bool {
		if !match(&e) {
			return true
		}
		le := &fsm.LogEvent{Position: fsm.Position{Index: index, Offset: pos}, Event: e}
		pos++
		chunk = append(chunk, le)
		size += le.Size()
		if len(chunk) >= watchChunkEvents || size >= watchChunkBytes {
			err = w.send(stream, chunk, b.Next, false)
			chunk, size = chunk[:0], 0
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	return w.send(stream, chunk, b.Next, true)
}

// eventToProto converts an event; a lease is judged at the event's own
// lease time.
func (s *Server) eventToProto(e fsm.Event, index uint64, pos uint32) *coordv1.WatchEvent {
	out := &coordv1.WatchEvent{Index: index, Position: pos, Family: e.Family, Kind: e.Kind, Key: e.Key,
		LeaseTime: pbtime.Dur(e.At), CalendarTime: pbtime.At(e.Cal)}
	switch r := e.Record.(type) {
	case *fsm.Lease:
		out.Record = &coordv1.WatchEvent_Lease{Lease: leaseToProto(*r, stamp{e.At, e.Cal})}
	case *fsm.Window:
		out.Record = &coordv1.WatchEvent_Window{Window: windowToProto(*r)}
	case *fsm.Resource:
		out.Record = &coordv1.WatchEvent_Resource{Resource: resourceToProto(*r, stamp{e.At, e.Cal})}
	case *fsm.Schedule:
		out.Record = &coordv1.WatchEvent_Schedule{Schedule: s.scheduleToProto(*r)}
	case *fsm.QueueJob:
		out.Record = &coordv1.WatchEvent_QueueJob{QueueJob: queueJobToProto(r, true, true)}
	}
	return out
}
