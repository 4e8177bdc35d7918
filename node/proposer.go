package node

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/fsm"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// Group commit above Raft. Raft already shares each fsync among the entries
// it has queued, but every entry still costs its own encoding (msgpack in
// the log store and on the wire), bbolt put, future and FSM dispatch. The
// proposer turns the commands proposed while earlier ones are in flight
// into one Batch entry: at most maxInflightEntries entries are in flight, so
// under load commands queue up and leave together; alone, a command goes at
// once, as a plain entry.
const (
	maxInflightEntries = 1
	maxBatch           = 512
)

type proposal struct {
	cmd  *fsmv1.Command
	done chan proposalResult
	// with go in the same entry, right after this one (a Submit and the
	// fetches of the long polls it feeds, queue.go).
	with []*proposal
}

type proposalResult struct {
	resp any
	err  error
}

// enqueueGroup hands p and p.with to the proposer as one unit: they are
// applied in one entry, in that order.
func (n *Node) enqueueGroup(ctx context.Context, p *proposal) (*proposal, error) {
	select {
	case n.proposals <- p:
		n.queued.Add(int64(1 + len(p.with)))
		return p, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.ctx.Done():
		return nil, ErrShutdown
	}
}

// result waits for an enqueued command's result. When ctx ends first the
// outcome is unknown.
func (n *Node) result(ctx context.Context, p *proposal) (any, error) {
	select {
	case r := <-p.done:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.ctx.Done():
		return nil, ErrShutdown
	}
}

// runProposer forms entries from queued proposals and applies them; one
// committer goroutine waits for their futures in order and answers the
// proposals (a goroutine per entry cost two goroutine starts and one more
// hand-off between Raft's answer and the caller).
func (n *Node) runProposer() {
	slots := make(chan struct{}, maxInflightEntries)
	inflight := make(chan entryInFlight, maxInflightEntries)
	go n.runCommitter(inflight, slots)
	var batch []*proposal
	drain := func() {
		for len(batch) < maxBatch {
			select {
			case p := <-n.proposals:
				batch = append(append(batch, p), p.with...)
			default:
				return
			}
		}
	}
	for {
		select {
		case p := <-n.proposals:
			batch = append(append(batch[:0:0], p), p.with...)
		case <-n.livePings.proposer: // it turns (/livez)
			continue
		case <-n.ctx.Done():
			return
		}
		drain()
		for waiting := true; waiting; {
			select {
			case slots <- struct{}{}:
				waiting = false
			case <-n.livePings.proposer: // waiting for Raft is turning too
			case <-n.ctx.Done():
				n.queued.Add(-int64(len(batch)))
				fail(batch, ErrShutdown)
				return
			}
		}
		drain() // what queued while the slots were busy goes along
		n.queued.Add(-int64(len(batch)))
		data, err := encodeEntry(batch)
		if err != nil {
			fail(batch, err)
			<-slots
			continue
		}
		// inflight has a place per slot: this send never waits.
		inflight <- entryInFlight{f: n.raft.Apply(data, n.cfg.ApplyTimeout), batch: batch}
	}
}

// entryInFlight is an applied entry and the proposals it carries.
type entryInFlight struct {
	f     raft.ApplyFuture
	batch []*proposal
}

// runCommitter frees the slot of each entry in flight once Raft has
// answered it, then answers its proposals, in order. It blocks on Raft's
// futures, which offer nothing to select on, so it is counted in
// n.futures rather than n.wg: a future
// still queued when Raft shuts down is never answered, and the callers
// stop waiting at shutdown (result) whatever the committer does.
func (n *Node) runCommitter(inflight <-chan entryInFlight, slots <-chan struct{}) {
	for {
		var e entryInFlight
		select {
		case e = <-inflight:
		case <-n.ctx.Done():
			return
		}
		n.futures.Add(1)
		err := n.translate(e.f.Error())
		n.futures.Add(-1)
		// The slot is free once Raft has answered: the next entry leaves
		// while this one's results are handed out (a wake-up per caller:
		// about 20 an entry under 64 lock clients).
		<-slots
		n.answer(e, err)
	}
}

// answer hands each proposal of an applied entry its result.
func (n *Node) answer(e entryInFlight, err error) {
	batch := e.batch
	if err != nil {
		fail(batch, err)
		return
	}
	resp := e.f.Response()
	if len(batch) == 1 {
		batch[0].done <- proposalResult{resp: resp}
		return
	}
	results, ok := resp.(fsm.BatchResult)
	if !ok || len(results) != len(batch) {
		fail(batch, fmt.Errorf("batch of %d answered with %T", len(batch), resp))
		return
	}
	for i, p := range batch {
		p.done <- proposalResult{resp: results[i]}
	}
}

// encodeEntry encodes one command as itself and several as a Batch.
func encodeEntry(batch []*proposal) ([]byte, error) {
	if len(batch) == 1 {
		return proto.Marshal(batch[0].cmd)
	}
	cmds := make([]*fsmv1.Command, len(batch))
	for i, p := range batch {
		cmds[i] = p.cmd
	}
	// The envelope's own stamp is unused: each command keeps its own.
	return proto.Marshal(fsm.Envelope(0, &fsmv1.Batch{Commands: cmds}))
}

func fail(batch []*proposal, err error) {
	for _, p := range batch {
		p.done <- proposalResult{err: err}
	}
}
