package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/api"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "coordd.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func settingOf(t *testing.T, o *options, name string) api.Setting {
	t.Helper()
	for _, s := range o.settings {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no setting %q in %+v", name, o.settings)
	return api.Setting{}
}

// A flag wins over COORDD_<FLAG>, which wins over the file, which wins
// over the default; each setting says where its value came from.
func TestConfigFilePrecedence(t *testing.T) {
	path := writeConfig(t, `
# a node's settings
id: from-file
limit-rate: 3
election-timeout: 2s
heartbeat-timeout: 700ms
peers:
  - node1=127.0.0.1:7402
  - node2=127.0.0.1:7412
enable-pprof: true
raft-wal-segment-size: 16MiB
`)
	t.Setenv("COORDD_LIMIT_RATE", "5")
	t.Setenv("COORDD_ELECTION_TIMEOUT", "3s")
	o, err := parseFlags([]string{"-id", "from-flag", "--insecure", "--config", path, "--election-timeout=4s"})
	if err != nil {
		t.Fatal(err)
	}
	if o.id != "from-flag" || o.election != 4*time.Second || o.rateLimit != 5 || o.heartbeat != 700*time.Millisecond ||
		o.peers != "node1=127.0.0.1:7402,node2=127.0.0.1:7412" || !o.pprof || o.walSegment != 16<<20 || o.configFile != path {
		t.Fatalf("%+v", o)
	}
	for name, want := range map[string]api.Setting{
		"id":                {Value: "from-flag", Source: "flag"},
		"election-timeout":  {Value: "4s", Source: "flag"},
		"limit-rate":        {Value: "5", Source: "env"},
		"heartbeat-timeout": {Value: "700ms", Source: "file"},
		"enable-pprof":      {Value: "true", Source: "file"},
		"retention":         {Value: (30 * 24 * time.Hour).String(), Source: "default"},
		"config":            {Value: path, Source: "flag"},
	} {
		want.Name = name
		if got := settingOf(t, o, name); got != want {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	// COORDD_CONFIG names the file too.
	t.Setenv("COORDD_CONFIG", path)
	if o, err = parseFlags(nil); err != nil || o.id != "from-file" || o.heartbeat != 700*time.Millisecond {
		t.Fatalf("COORDD_CONFIG: %+v %v", o, err)
	}
	if s := settingOf(t, o, "config"); s.Source != "env" {
		t.Fatalf("config from the environment: %+v", s)
	}
	// An empty file is no settings.
	if _, err := parseFlags([]string{"--config=" + writeConfig(t, "# nothing\n")}); err != nil {
		t.Fatal(err)
	}
}

// An unknown key, a value of the wrong type, a list or mapping where a
// value belongs: an error naming the file, the line and the key.
func TestConfigFileErrors(t *testing.T) {
	for _, c := range []struct {
		text string
		want []string
	}{
		{"id: a\nheartbeat_timeout: 1s\n", []string{":2:", `"heartbeat_timeout"`, "unknown key"}},
		{"id: a\n\nlimit-rate: fast\n", []string{":3:", `"limit-rate"`, `"fast"`}},
		{"heartbeat-timeout: 5\n", []string{":1:", `"heartbeat-timeout"`, "want a duration"}},
		{"enable-pprof: maybe\n", []string{`"enable-pprof"`, `"maybe"`, "want true or false"}},
		{"limit-leases: -1\n", []string{`"limit-leases"`, "whole number"}},
		{"raft-wal-segment-size: 64MB\n", []string{`"raft-wal-segment-size"`, `"64MB"`}},
		{"peers: {node1: x}\n", []string{`"peers"`, "want a value, got a mapping"}},
		{"limit-rate: [1, 2]\n", []string{`"limit-rate"`, "got a list"}},
		{"config: other.yaml\n", []string{`"config"`, "cannot name another"}},
		{"version: true\n", []string{`"version"`}},
		{"- id: a\n", []string{"want a mapping"}},
		{"id: a\nid: b\n", []string{":2:", "already defined at line 1"}},
	} {
		path := writeConfig(t, c.text)
		_, err := parseFlags([]string{"--config", path})
		if err == nil {
			t.Errorf("%q accepted", c.text)
			continue
		}
		for _, w := range append(c.want, path) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not contain %q", c.text, err, w)
			}
		}
	}
	if _, err := parseFlags([]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}); err == nil ||
		!strings.Contains(err.Error(), "--config") {
		t.Fatalf("a missing file: %v", err)
	}
	// Two errors at once are both named.
	_, err := parseFlags([]string{"--config", writeConfig(t, "nope: 1\nlimit-rate: x\n")})
	if err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), `"limit-rate"`) {
		t.Fatalf("two errors: %v", err)
	}
}

// Secrets show as <redacted> in the effective configuration (the log line
// and Cluster.Config); paths to TLS keys do not.
func TestSettingsRedactSecrets(t *testing.T) {
	path := writeConfig(t, "delivery-secrets: /etc/coordd/whsec.txt\ntls-key: /etc/coordd/node.key\n")
	o, err := parseFlags([]string{"--config", path})
	if err != nil {
		t.Fatal(err)
	}
	if s := settingOf(t, o, "delivery-secrets"); s.Value != redacted || s.Source != "file" {
		t.Fatalf("delivery-secrets: %+v", s)
	}
	if s := settingOf(t, o, "tls-key"); s.Value != "/etc/coordd/node.key" {
		t.Fatalf("tls-key: %+v", s)
	}
	for _, s := range o.settings {
		if strings.Contains(s.Value, "whsec") {
			t.Fatalf("%s shows a secret: %q", s.Name, s.Value)
		}
		if hiddenFlags[s.Name] || s.Name == "version" {
			t.Fatalf("%s listed", s.Name)
		}
	}
	for name, secret := range map[string]bool{"delivery-secrets": true, "otlp-headers": true, "admin-password": true,
		"tls-key": false, "peer-tls-key": false, "http-read-header-timeout": false, "delivery-ca": false} {
		if secretFlag(name) != secret {
			t.Errorf("secretFlag(%q) = %v", name, !secret)
		}
	}
	// Not set: shown as empty, not as redacted.
	if o, err = parseFlags(nil); err != nil || settingOf(t, o, "delivery-secrets").Value != "" {
		t.Fatalf("%+v %v", o, err)
	}
}

// -h names the file and the precedence.
func TestUsageNamesTheConfigFile(t *testing.T) {
	var out strings.Builder
	o, err := parseFlagsTo(&out, []string{"-h"})
	if err != nil || o != nil {
		t.Fatalf("%+v %v", o, err)
	}
	for _, w := range []string{"-config", "--config file", "a flag wins over the environment"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("usage lacks %q:\n%s", w, out.String())
		}
	}
}
