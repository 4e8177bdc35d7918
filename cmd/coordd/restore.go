package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/internal/backup"
	"github.com/coordd/coordd/internal/logstore"
	"github.com/coordd/coordd/node"
)

// defaultGenerationBump is added to every lease generation by a restore
// (--bump-generations): grants the lost cluster made after the backup
// stay below every grant of the restored one unless a lease changed hands
// more than this often between the backup and the loss.
const defaultGenerationBump = 1_000_000

// restoreUsage heads coordd restore -h.
const restoreUsage = `Usage: coordd restore --from FILE --data-dir DIR --id ID --raft-addr ADDR [--peers id=addr,...] [flags]

Seeds the data directory of a node of a NEW cluster from a backup written
by "coordctl snapshot save" (docs/backup-and-upgrade.md). The directory
must not exist or be empty. The backup's checksum is verified first.

Every lease that was held is released (its holder must acquire again) and
every lease generation grows by --bump-generations, so that no token the
lost cluster granted after the backup is granted again (G1). Fenced
resources, windows, jobs, schedules and both clocks are kept as they are.

Either restore every node from the same file with the same --peers (each
with its own --id, --raft-addr and --data-dir), or restore one node without
--peers and start the others with empty data dirs and --join. Then start
coordd on each data dir with the usual flags; --peers is ignored there.

Flags:
`

// runRestore is "coordd restore".
func runRestore(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("coordd restore", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), restoreUsage)
		fs.PrintDefaults()
	}
	from := fs.String("from", "", "backup file written by coordctl snapshot save (required)")
	dir := fs.String("data-dir", "", "data directory to create; must not exist or be empty (required)")
	id := fs.String("id", "", "Raft server id of this node in the new cluster (required)")
	raftAddr := fs.String("raft-addr", "", "Raft address of this node in the new cluster (required)")
	peers := fs.String("peers", "", "the new cluster's voters, id=raft_addr,... (every node restored from the same file with the same list); empty: this node alone, the others join")
	store := fs.String("raft-log-store", "", "Raft log store of the new data dir: wal or bolt (default wal)")
	bump := fs.Uint64("bump-generations", defaultGenerationBump, "added to every lease generation (see above; 0 only for a backup of a cluster that was stopped)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("restore: unexpected argument %q", fs.Arg(0))
	}
	for _, f := range []struct{ name, v string }{{"--from", *from}, {"--data-dir", *dir}, {"--id", *id}, {"--raft-addr", *raftAddr}} {
		if f.v == "" {
			return fmt.Errorf("restore: %s is required", f.name)
		}
	}
	kind, err := logstore.ParseKind(*store)
	if err != nil {
		return fmt.Errorf("restore: --raft-log-store: %w", err)
	}
	members, err := node.ParsePeers(*peers)
	if err != nil {
		return fmt.Errorf("restore: --peers: %w", err)
	}
	if len(members) == 0 {
		members = map[string]string{*id: *raftAddr}
	}
	if addr, ok := members[*id]; !ok || addr != *raftAddr {
		return fmt.Errorf("restore: --peers must list this node as %s=%s", *id, *raftAddr)
	}
	began := time.Now()
	h, err := backup.Verify(*from)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if h.SnapshotFormat > fsm.SnapshotFormat {
		return fmt.Errorf("restore: %s holds snapshot format %d, newer than this coordd reads (%d): restore with that coordd release",
			*from, h.SnapshotFormat, fsm.SnapshotFormat)
	}
	if err := checkEmptyDir(*dir); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	sum, err := seed(*dir, kind, *from, h, members, *bump)
	if err != nil {
		// The directory was empty or absent: leave nothing half-seeded.
		if entries, _ := os.ReadDir(*dir); len(entries) > 0 {
			err = errors.Join(err, removeContents(*dir, entries))
		}
		return fmt.Errorf("restore: %w", err)
	}
	fmt.Fprintf(out, "restored %s into %s (%s log store) as %s of %d voters in %s\n", *from, *dir,
		cmpKind(kind), *id, len(members), time.Since(began).Round(time.Millisecond))
	fmt.Fprintf(out, "snapshot index %d, term %d, saved by %s at %s\n", h.Index, h.Term, h.NodeID, h.TakenAt.Format(time.RFC3339))
	fmt.Fprintf(out, "leases %d (all released; generations +%d, highest now %d), resources %d, windows %d, jobs %d, schedules %d\n",
		sum.Leases, *bump, sum.MaxGeneration, sum.Resources, sum.Windows, sum.Jobs, sum.Schedules)
	return nil
}

func cmpKind(k logstore.Kind) logstore.Kind {
	if k == "" {
		return logstore.Default
	}
	return k
}

// checkEmptyDir accepts a directory that does not exist or is empty.
func checkEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if len(entries) > 0 {
		names := make([]string, 0, 3)
		for _, e := range entries[:min(3, len(entries))] {
			names = append(names, e.Name())
		}
		return fmt.Errorf("--data-dir %s is not empty (it holds %s): a restore seeds a new node only; "+
			"move the directory away or pick another", dir, strings.Join(names, ", "))
	}
	return nil
}

func removeContents(dir string, entries []os.DirEntry) error {
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// seed writes the new node's data dir: the log store of kind (empty, with
// the backup's term as the current term) and one Raft snapshot at the
// backup's index and term with the new membership, holding the backup's
// state as PrepareRestore changes it. Raft restores that snapshot when
// coordd starts on the directory.
func seed(dir string, kind logstore.Kind, from string, h *backup.Header, members map[string]string, bump uint64) (*fsm.SnapshotSummary, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	st, err := logstore.Open(dir, logstore.Options{Kind: kind})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	// Raft's own key: a term below the snapshot's would start the new
	// cluster's elections below the entries it already holds.
	if err := st.Stable.SetUint64([]byte("CurrentTerm"), h.Term); err != nil {
		return nil, err
	}
	var conf raft.Configuration
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(members[id]), Suffrage: raft.Voter})
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		return nil, err
	}
	// The transport only encodes the legacy peers field of the snapshot's
	// meta (the address as bytes, as the TCP transport does).
	_, trans := raft.NewInmemTransport("")
	sink, err := snaps.Create(raft.SnapshotVersionMax, h.Index, h.Term, conf, h.Index, trans)
	if err != nil {
		return nil, err
	}
	_, body, err := backup.Open(from)
	if err != nil {
		_ = sink.Cancel()
		return nil, err
	}
	defer body.Close()
	sum, err := fsm.PrepareRestore(body, sink, fsm.RestoreOptions{GenerationBump: bump,
		KeepMember: func(id string) bool { _, ok := members[id]; return ok }})
	if err != nil {
		_ = sink.Cancel()
		return nil, err
	}
	if err := sink.Close(); err != nil {
		return nil, err
	}
	return sum, nil
}
