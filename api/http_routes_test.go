package api

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Every method coord_http.yaml routes is named by the access table: a
// route whose method the table does not name would be admin-only by
// default, never open by mistake, but it must be a decision.
func TestHTTPRoutesInTheAccessTable(t *testing.T) {
	raw, err := os.ReadFile("../proto/coord/v1/coord_http.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		HTTP struct {
			Rules []struct {
				Selector string `json:"selector"`
			} `json:"rules"`
		} `json:"http"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.HTTP.Rules) < 30 {
		t.Fatalf("%d rules", len(cfg.HTTP.Rules))
	}
	for _, r := range cfg.HTTP.Rules {
		i := strings.LastIndexByte(r.Selector, '.')
		full := "/" + r.Selector[:i] + "/" + r.Selector[i+1:]
		if _, ok := methods[full]; !ok {
			t.Errorf("%s (routed over HTTP) is not in the access table", full)
		}
	}
}
