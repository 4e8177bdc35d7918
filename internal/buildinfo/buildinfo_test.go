package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	full := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/coordd/coordd", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "-trimpath", Value: "true"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "a513e27c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f60"},
			{Key: "vcs.time", Value: "2026-11-30T19:21:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	released := &debug.BuildInfo{GoVersion: "go1.26.3", Main: debug.Module{Path: "github.com/coordd/coordd", Version: "v0.3.0"}}
	clean := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want Info
		line string
	}{
		{"checkout with changes", full, true,
			Info{Version: "(devel)", Revision: "a513e27c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f60", Time: "2026-11-30T19:21:00Z", Modified: true, GoVersion: "go1.26.0"},
			"coordd (devel) a513e27c1d2e-modified 2026-11-30T19:21:00Z go1.26.0"},
		{"go install of a release", released, true, Info{Version: "v0.3.0", GoVersion: "go1.26.3"}, "coordd v0.3.0 go1.26.3"},
		{"clean tree, short revision", clean, true, Info{Version: "(devel)", Revision: "abc", GoVersion: "go1.26.0"}, "coordd (devel) abc go1.26.0"},
		{"no build info", nil, false, Info{Version: "unknown"}, "coordd unknown"},
		{"empty main version", &debug.BuildInfo{GoVersion: "go1.26.0"}, true, Info{Version: "unknown", GoVersion: "go1.26.0"}, "coordd unknown go1.26.0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := From(c.bi, c.ok)
			if got != c.want {
				t.Fatalf("From = %+v, want %+v", got, c.want)
			}
			if line := got.String("coordd"); line != c.line {
				t.Fatalf("String = %q, want %q", line, c.line)
			}
		})
	}
}

// A test binary has build information: at least the Go version.
func TestReadRunningBinary(t *testing.T) {
	if got := Read(); got.GoVersion != runtime.Version() || got.Version == "" {
		t.Fatalf("Read = %+v, want Go version %s", got, runtime.Version())
	}
}
