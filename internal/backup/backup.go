// Package backup is the file that coordctl snapshot save writes and coordd
// restore reads: a 4 KiB header, then the state machine's snapshot as Raft
// stores it (fsm snapshot encoding). The header is one line of magic
// ("coordd-backup-v1"), one line of JSON (Header: the snapshot's Raft
// index and term, formats, membership, size and SHA-256 of the snapshot
// bytes), padded with spaces to 4 KiB. A file is written under a temporary
// name, synced, renamed into place and read back (Writer.Commit): a file
// that has its name is whole and its checksum matches.
package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Format is the version of the backup file (its header) this build writes
// and the newest it reads.
const Format = 1

// HeaderSize is the length of the header block.
const HeaderSize = 4096

const magicPrefix = "coordd-backup-v"

var magic = magicPrefix + strconv.Itoa(Format) + "\n"

// Member is one server of the Raft configuration at the snapshot.
type Member struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft_address"`
	GRPCAddress string `json:"grpc_address,omitempty"`
	Suffrage    string `json:"suffrage,omitempty"`
}

// Header describes a backup.
type Header struct {
	Format         int       `json:"format"`
	SnapshotFormat int       `json:"snapshot_format"`
	Index          uint64    `json:"index"`
	Term           uint64    `json:"term"`
	NodeID         string    `json:"node_id"`
	TakenAt        time.Time `json:"taken_at"`
	CoorddVersion  string    `json:"coordd_version,omitempty"`
	Members        []Member  `json:"members"`
	// Size and SHA256 are of the snapshot bytes after the header.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func (h *Header) encode() ([]byte, error) {
	j, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	b := append([]byte(magic), j...)
	b = append(b, '\n')
	if len(b) > HeaderSize-1 {
		return nil, fmt.Errorf("backup header of %d bytes exceeds %d (too many members?)", len(b), HeaderSize-1)
	}
	b = append(b, bytes.Repeat([]byte{' '}, HeaderSize-1-len(b))...)
	return append(b, '\n'), nil
}

func decodeHeader(b []byte) (*Header, error) {
	first, rest, ok := bytes.Cut(b, []byte{'\n'})
	if !ok || !strings.HasPrefix(string(first), magicPrefix) {
		return nil, errors.New("not a coordd backup (no coordd-backup-v header)")
	}
	v, err := strconv.Atoi(strings.TrimPrefix(string(first), magicPrefix))
	if err != nil {
		return nil, fmt.Errorf("not a coordd backup (header %q)", first)
	}
	if v > Format {
		return nil, fmt.Errorf("backup format v%d is newer than this coordd reads (v%d): use a coordd release that knows it", v, Format)
	}
	line, _, _ := bytes.Cut(rest, []byte{'\n'})
	h := &Header{}
	if err := json.Unmarshal(line, h); err != nil {
		return nil, fmt.Errorf("backup header: %w", err)
	}
	if h.Format != v {
		return nil, fmt.Errorf("backup header: format %d in a v%d file", h.Format, v)
	}
	if h.Size < 0 || len(h.SHA256) != sha256.Size*2 {
		return nil, errors.New("backup header: no size or SHA-256 (the file was not completed)")
	}
	return h, nil
}

// Writer writes one backup file: Write the snapshot bytes, then Commit
// (or Abort).
type Writer struct {
	path string
	f    *os.File
	h    hash.Hash
	size int64
}

// Create starts a backup at path: a temporary file next to it, with room
// for the header. An existing path is replaced only at Commit.
func Create(path string) (*Writer, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(make([]byte, HeaderSize)); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &Writer{path: path, f: f, h: sha256.New()}, nil
}

func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	w.size += int64(n)
	return n, err
}

// Abort removes the temporary file.
func (w *Writer) Abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

// Commit checks the bytes written against the sender's size and SHA-256,
// writes the header, syncs, renames the file into place, syncs the
// directory and reads the file back (Verify). On error the temporary file
// is removed and path is left as it was.
func (w *Writer) Commit(h Header, wantSize int64, wantSHA string) (*Header, error) {
	sum := hex.EncodeToString(w.h.Sum(nil))
	if wantSize != w.size || wantSHA != sum {
		w.Abort()
		return nil, fmt.Errorf("snapshot received corrupt: %d bytes with SHA-256 %s, the sender sent %d bytes with %s", w.size, sum, wantSize, wantSHA)
	}
	h.Format, h.Size, h.SHA256 = Format, w.size, sum
	hdr, err := h.encode()
	if err == nil {
		_, err = w.f.WriteAt(hdr, 0)
	}
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.f.Name(), w.path)
	}
	if err != nil {
		os.Remove(w.f.Name())
		return nil, err
	}
	if d, err := os.Open(filepath.Dir(w.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return Verify(w.path)
}

// Open reads path's header and returns a reader of its snapshot bytes,
// which fails at the end if they do not match the header's size and
// SHA-256. Close it.
func Open(path string) (*Header, io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, HeaderSize)
	if _, err := io.ReadFull(f, buf); err != nil {
		f.Close()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil, fmt.Errorf("%s: not a coordd backup (shorter than its header)", path)
		}
		return nil, nil, err
	}
	h, err := decodeHeader(buf)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, &verifyingReader{path: path, f: f, r: io.LimitReader(f, h.Size), h: sha256.New(), want: h}, nil
}

// Verify reads the whole file and checks its size and SHA-256.
func Verify(path string) (*Header, error) {
	h, rc, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return nil, err
	}
	return h, nil
}

// verifyingReader reads the snapshot bytes, and at their end checks them.
type verifyingReader struct {
	path string
	f    *os.File
	r    io.Reader
	h    hash.Hash
	n    int64
	want *Header
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if errors.Is(err, io.EOF) {
		if v.n != v.want.Size {
			return n, fmt.Errorf("%s: truncated: %d snapshot bytes of %d", v.path, v.n, v.want.Size)
		}
		if extra, _ := v.f.Read(make([]byte, 1)); extra > 0 {
			return n, fmt.Errorf("%s: bytes after the %d the header declares", v.path, v.want.Size)
		}
		if sum := hex.EncodeToString(v.h.Sum(nil)); sum != v.want.SHA256 {
			return n, fmt.Errorf("%s: checksum mismatch: SHA-256 %s, the header says %s (the file is corrupt)", v.path, sum, v.want.SHA256)
		}
	}
	return n, err
}

func (v *verifyingReader) Close() error { return v.f.Close() }
