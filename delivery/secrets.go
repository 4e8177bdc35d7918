package delivery

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/coordd/coordd/fsm"
	"github.com/coordd/coordd/webhook"
)

// SecretsFlag is coordd's flag naming the signing secrets file.
const SecretsFlag = "--delivery-secrets"

// Secrets are the signing secrets by name, each with its keys: the
// current one first, then the one being rotated out (both sign during a
// rotation). They live only in the servers' configuration: a target names
// one, and no read ever returns a key.
type Secrets map[string][]webhook.Secret

// LoadSecrets reads a secrets file: one secret a line, "<name> whsec_…
// [whsec_… of the previous key]"; blank lines and lines starting with '#'
// are skipped. Names are [A-Za-z0-9._-], up to 128 bytes.
func LoadSecrets(path string) (Secrets, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SecretsFlag, err)
	}
	defer f.Close()
	out := Secrets{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		name := fields[0]
		if len(fields) < 2 || len(fields) > 3 || name == "" || !fsm.ValidSecretName(name) {
			return nil, fmt.Errorf("%s %s:%d: want \"<name> whsec_... [whsec_... (previous)]\" with a name of [A-Za-z0-9._-]", SecretsFlag, path, line)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s %s:%d: secret %q given twice", SecretsFlag, path, line, name)
		}
		for _, s := range fields[1:] {
			key, err := webhook.ParseSecret(s)
			if err != nil {
				return nil, fmt.Errorf("%s %s:%d (%s): %v", SecretsFlag, path, line, name, err)
			}
			out[name] = append(out[name], key)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", SecretsFlag, path, err)
	}
	return out, nil
}
