package api

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// snapshotChunk is the size of one SaveSnapshot chunk.
const snapshotChunk = 256 << 10

// SaveSnapshot streams a consistent snapshot from the leader: info, chunks
// of at most snapshotChunk bytes, and a trailer with their size and
// SHA-256 (docs/backup-and-upgrade.md). A follower answers NOT_LEADER with
// the leader's address: a snapshot is not forwarded.
func (c *cluster) SaveSnapshot(_ *coordv1.SaveSnapshotRequest, stream coordv1.Cluster_SaveSnapshotServer) error {
	w := &chunkSender{stream: stream, h: sha256.New(), buf: make([]byte, 0, snapshotChunk)}
	err := c.s.node.SaveSnapshot(stream.Context(), func(info *coordv1.SnapshotInfo) error {
		return stream.Send(&coordv1.SaveSnapshotResponse{Part: &coordv1.SaveSnapshotResponse_Info{Info: info}})
	}, w)
	if err == nil {
		err = w.flush()
	}
	if err != nil {
		return toStatus(err)
	}
	return stream.Send(&coordv1.SaveSnapshotResponse{Part: &coordv1.SaveSnapshotResponse_Trailer{Trailer: &coordv1.SnapshotTrailer{
		Size: w.size, Sha256: hex.EncodeToString(w.h.Sum(nil))}}})
}

// chunkSender is an io.Writer that sends what it is given as chunks.
type chunkSender struct {
	stream coordv1.Cluster_SaveSnapshotServer
	h      hash.Hash
	buf    []byte
	size   int64
}

func (w *chunkSender) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), snapshotChunk-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == snapshotChunk {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkSender) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	w.h.Write(w.buf)
	w.size += int64(len(w.buf))
	err := w.stream.Send(&coordv1.SaveSnapshotResponse{Part: &coordv1.SaveSnapshotResponse_Chunk{Chunk: w.buf}})
	w.buf = make([]byte, 0, snapshotChunk) // Send may keep the slice until it is written
	return err
}
