// Package buildinfo reports what a coordd binary was built from (module
// version, VCS revision and time, a dirty work tree, the Go version), read
// from the build information the Go toolchain embeds. `coordd --version`
// and `coordctl version` print it.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Info is a binary's build information. Fields the build did not record are
// empty: `go run` and `-buildvcs=false` builds carry no VCS fields, and a
// build from a checkout has version "(devel)".
type Info struct {
	Version   string `json:"version"`    // module version, e.g. v0.3.0 or (devel)
	Revision  string `json:"revision"`   // vcs.revision: the commit
	Time      string `json:"time"`       // vcs.time: the commit's time (RFC 3339)
	Modified  bool   `json:"modified"`   // vcs.modified: the work tree had uncommitted changes
	GoVersion string `json:"go_version"` // the toolchain, e.g. go1.26.0
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	return From(bi, ok)
}

// From extracts Info from what debug.ReadBuildInfo returned.
func From(bi *debug.BuildInfo, ok bool) Info {
	if !ok || bi == nil {
		return Info{Version: "unknown"}
	}
	info := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if info.Version == "" {
		info.Version = "unknown"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is one line for `--version`: the program name, the version, the
// revision (12 hex digits, "-modified" for a dirty tree), its time and the
// Go version, leaving out what is unknown, e.g.
//
//	coordd (devel) a513e27c1d2e-modified 2026-11-30T19:21:00Z go1.26.0
func (i Info) String(program string) string {
	parts := []string{program, i.Version}
	if i.Revision != "" {
		rev := i.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if i.Modified {
			rev += "-modified"
		}
		parts = append(parts, rev)
	}
	if i.Time != "" {
		parts = append(parts, i.Time)
	}
	if i.GoVersion != "" {
		parts = append(parts, i.GoVersion)
	}
	return strings.Join(parts, " ")
}
