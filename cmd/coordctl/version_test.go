package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/buildinfo"
)

// version needs no cluster (the endpoint is unreachable) and prints one
// line, or one JSON document with -o json.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--endpoints", "127.0.0.1:1", "version"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if line := out.String(); !strings.HasPrefix(line, "coordctl ") || !strings.HasSuffix(line, runtime.Version()+"\n") {
		t.Fatalf("version line %q", line)
	}
	out.Reset()
	if code := run([]string{"--endpoints", "127.0.0.1:1", "-o", "json", "version"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var got buildinfo.Info
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got.GoVersion != runtime.Version() || got.Version == "" {
		t.Fatalf("json %q: %+v %v", out.String(), got, err)
	}
	if code := run([]string{"version", "extra"}, &out, &errOut); code != exitUsage {
		t.Fatalf("version with an argument: exit %d", code)
	}
}
