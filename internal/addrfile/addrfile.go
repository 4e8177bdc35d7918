// Package addrfile is the address file coordd writes into its data dir
// once it listens: the addresses it actually got, so that a node started
// on port 0 (--grpc-addr 127.0.0.1:0 …) can be found without guessing a
// port. coordd writes it; the process test harness (internal/proccluster)
// reads it.
package addrfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Name is the file's name in the data dir.
const Name = "addresses.json"

// Addresses are what a node listens on. HTTP is empty when the node serves
// no HTTP.
type Addresses struct {
	ID   string `json:"id"`
	GRPC string `json:"grpc"`
	HTTP string `json:"http"`
	Raft string `json:"raft"`
}

// Path is the address file of a data dir.
func Path(dataDir string) string { return filepath.Join(dataDir, Name) }

// Write replaces the data dir's address file atomically (a temporary file
// renamed over it), so a reader sees the old file, none, or the new one,
// never half of it.
func Write(dataDir string, a Addresses) error {
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dataDir, Name+".tmp-*")
	if err != nil {
		return fmt.Errorf("address file: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	err = errors.Join(err, tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), Path(dataDir))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("address file: %w", err)
	}
	return nil
}

// Remove deletes a data dir's address file (a previous start's); a missing
// file is not an error.
func Remove(dataDir string) error {
	if err := os.Remove(Path(dataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("address file: %w", err)
	}
	return nil
}

// Read reads a data dir's address file. A missing file is an error that
// matches os.ErrNotExist.
func Read(dataDir string) (Addresses, error) {
	var a Addresses
	b, err := os.ReadFile(Path(dataDir))
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("%s: %w", Path(dataDir), err)
	}
	return a, nil
}
