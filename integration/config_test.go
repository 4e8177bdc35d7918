package integration

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordd/coordd/internal/proccluster"
)

// A node started from a --config file (a flag and a COORDD_ variable on
// top of it) answers its effective configuration to coordctl status
// --config: every setting with its source, the delivery secrets' file
// redacted, and no secret in it; the node's log line says the same.
func TestProcessConfigFileAndStatusConfig(t *testing.T) {
	dir := t.TempDir()
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	secrets := filepath.Join(dir, "delivery-secrets.txt")
	if err := os.WriteFile(secrets, []byte("billing "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "coordd.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("retention: 48h\nlimit-rate: 250\njob-max-finished: 5000\ndelivery-secrets: %s\n", secrets)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COORDD_JOB_MAX_FINISHED", "7000") // over the file
	pc := proccluster.Start(t, coorddBin, 1, "--config", config, "--limit-rate", "300")
	nd := pc.WaitLeader()
	c := ctl{t: t, endpoints: nd.GRPCAddr}
	out := c.ok("status", "--config")
	for _, want := range []string{"config file " + config, "retention", "48h0m0s", "file", "limit-rate", "300", "flag",
		"job-max-finished", "7000", "env", "delivery-secrets", "<redacted>"} {
		if !strings.Contains(out, want) {
			t.Errorf("status --config lacks %q:\n%s", want, out)
		}
	}
	doc := c.json("status", "--config")
	nodes, _ := doc["nodes"].([]any)
	if len(nodes) != 1 {
		t.Fatalf("json: %v", doc)
	}
	settings := map[string]map[string]any{}
	for _, s := range field(nodes[0].(map[string]any), "config", "settings").([]any) {
		m := s.(map[string]any)
		settings[m["name"].(string)] = m
	}
	for name, want := range map[string][2]string{"retention": {"48h0m0s", "file"}, "limit-rate": {"300", "flag"},
		"job-max-finished": {"7000", "env"}, "delivery-secrets": {"<redacted>", "file"}, "min-ttl": {"0s", "default"}} {
		if s := settings[name]; s == nil || s["value"] != want[0] || s["source"] != want[1] {
			t.Errorf("%s: %v, want %v", name, s, want)
		}
	}
	log, err := os.ReadFile(nd.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{out, string(log)} {
		if strings.Contains(text, secret) || strings.Contains(text, secrets) {
			t.Fatalf("a secret (or the secrets file's path) shows:\n%s", text)
		}
	}
	if !strings.Contains(string(log), "effective configuration") || !strings.Contains(string(log), "from_file=") {
		t.Fatalf("no effective configuration line in the log:\n%s", log)
	}
}
