package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/coordd/coordd/api"
)

// The configuration file (--config FILE, or COORDD_CONFIG): YAML whose
// keys are the long flags' names, spelled as on the command line:
//
//	id: node1
//	data-dir: /var/lib/coordd
//	peers: [node1=10.0.0.1:7402, node2=10.0.0.2:7402]   # or one string
//	heartbeat-timeout: 500ms
//
// A flag wins over COORDD_<FLAG>, which wins over the file, which wins over
// the default. An unknown key, a value that does not parse as its flag,
// or a list or mapping where a value belongs, is an error naming the file,
// the line and the key. docs/configuration.md documents it.

// noFileKeys are flags a file cannot set.
var noFileKeys = map[string]string{
	"config":  "a configuration file cannot name another",
	"version": "it is a command-line action",
}

// configPath is --config's value in args, or COORDD_CONFIG's: the file is
// read before the flags are parsed, so that they override it.
func configPath(fs *flag.FlagSet, args []string) string {
	if v, ok := scanFlags(fs, args)["config"]; ok {
		return v
	}
	return os.Getenv("COORDD_CONFIG")
}

// scanFlags are the flags args set, with their values, read as the flag
// package reads them (a flag that is not boolean takes the next argument
// unless written name=value; parsing stops at "--" or the first argument
// that is not a flag). The flag package itself parses args afterwards.
func scanFlags(fs *flag.FlagSet, args []string) map[string]string {
	set := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			continue // the parse reports it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) && i+1 < len(args) {
			i++
			value = args[i]
		}
		set[name] = value
	}
	return set
}

// applyConfigFile sets, from the file at path, every flag whose variable
// the environment did not set (env), and returns the names it set.
func applyConfigFile(fs *flag.FlagSet, path string, env map[string]bool) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	set := map[string]bool{}
	if len(doc.Content) == 0 {
		return set, nil // empty
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config %s:%d: want a mapping of flag names to values", path, root.Line)
	}
	var errs []error
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		where := fmt.Sprintf("config %s:%d: key %q", path, k.Line, k.Value)
		if line, dup := seen[k.Value]; dup {
			errs = append(errs, fmt.Errorf("%s: already defined at line %d", where, line))
			continue
		}
		seen[k.Value] = k.Line
		f := fs.Lookup(k.Value)
		if why, no := noFileKeys[k.Value]; no {
			errs = append(errs, fmt.Errorf("%s: not a setting in a file: %s", where, why))
			continue
		}
		if f == nil || k.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("%s: unknown key (keys are coordd's flag names, as in coordd -h)", where))
			continue
		}
		value, err := scalarValue(f, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		if env[envName(k.Value)] {
			continue // the environment wins (it set the flag's default)
		}
		if err := fs.Set(k.Value, value); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q: %w", where, value, typeError(f, err)))
			continue
		}
		set[k.Value] = true
	}
	return set, errors.Join(errs...)
}

// scalarValue is the text a flag is set to from a YAML value: a scalar as
// written; for a string flag also a list of scalars, joined with commas
// (peers, delivery-allow). Anything else is a type error.
func scalarValue(f *flag.Flag, v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", nil
		}
		return v.Value, nil
	case yaml.SequenceNode:
		if g, ok := f.Value.(flag.Getter); ok && isString(g.Get()) {
			parts := make([]string, 0, len(v.Content))
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					return "", fmt.Errorf("want a list of values, got a nested %s at line %d", kindName(item), item.Line)
				}
				parts = append(parts, item.Value)
			}
			return strings.Join(parts, ","), nil
		}
	}
	return "", fmt.Errorf("want a value, got a %s", kindName(v))
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	case yaml.AliasNode:
		return "alias"
	}
	return "value"
}

// typeError says what a flag wants when a value does not parse as it.
func typeError(f *flag.Flag, err error) error {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err // the value's own error (sizes: logstore.ParseSize)
	}
	switch g.Get().(type) {
	case time.Duration:
		return errors.New("want a duration such as 500ms, 30s or 2h")
	case bool:
		return errors.New("want true or false")
	case float64:
		return errors.New("want a number")
	case uint, uint64, int:
		return errors.New("want a whole number >= 0")
	}
	return err
}

// redacted is what a secret's value shows as, in the log and over the API.
const redacted = "<redacted>"

// secretFlag: a flag whose value is (or names) a secret. TLS key paths
// are not: their files are protected by their permissions, and the path
// helps an operator; the delivery signing secrets' file is listed here
// all the same, as anything named a secret, and so is a flag of headers
// (an exporter's carry credentials).
func secretFlag(name string) bool {
	for _, w := range []string{"secret", "password", "token", "headers"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// settings are the effective configuration: every flag (the hidden test
// hooks only when set) with its value, secrets redacted, and its source.
func settings(fs *flag.FlagSet, cli map[string]string, env, file map[string]bool) []api.Setting {
	var out []api.Setting
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "version" {
			return
		}
		source := "default"
		switch {
		case hasKey(cli, f.Name):
			source = "flag"
		case env[envName(f.Name)]:
			source = "env"
		case file[f.Name]:
			source = "file"
		}
		if hiddenFlags[f.Name] && source == "default" {
			return
		}
		value := f.Value.String()
		if secretFlag(f.Name) && value != "" {
			value = redacted
		}
		out = append(out, api.Setting{Name: f.Name, Value: value, Source: source})
	})
	return out
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}
