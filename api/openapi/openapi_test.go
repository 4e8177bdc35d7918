package openapi

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"sigs.k8s.io/yaml"
)

// The document validates as OpenAPI 3 (kin-openapi).
func TestDocumentValidates(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(Document)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The proto comments are the descriptions.
	acq := doc.Paths.Find("/v1/leases/{name}/acquire")
	if acq == nil || acq.Post == nil || !strings.Contains(acq.Post.Summary, "generation") {
		t.Fatalf("acquire: no proto comment in %+v", acq)
	}
}

// pathVar is a path template's variable, with its pattern: {name=**}.
var pathVar = regexp.MustCompile(`\{([a-z_.]+)(=[^}]*)?\}`)

// The document has exactly the routes of coord_http.yaml: a route the
// gateway serves that the document lacks (or the reverse) fails here.
func TestDocumentHasEveryRoute(t *testing.T) {
	raw, err := os.ReadFile("../../proto/coord/v1/coord_http.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		HTTP struct {
			Rules []map[string]any `json:"rules"`
		} `json:"http"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range cfg.HTTP.Rules {
		for _, m := range []string{"get", "post", "put", "patch", "delete"} {
			if p, ok := r[m].(string); ok {
				want = append(want, strings.ToUpper(m)+" "+pathVar.ReplaceAllString(p, "{$1}"))
			}
		}
	}
	doc, err := openapi3.NewLoader().LoadFromData(Document)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for p, item := range doc.Paths.Map() {
		for m := range item.Operations() {
			got = append(got, m+" "+p)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) < 30 || !slices.Equal(got, want) {
		t.Fatalf("the document's routes differ from coord_http.yaml's (run scripts/genproto.sh):\n document: %v\n yaml:     %v", got, want)
	}
}
