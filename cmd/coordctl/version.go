package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/coordd/coordd/internal/buildinfo"
)

// version needs no cluster: it prints what this binary was built from.
func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print coordctl's version: module version, VCS revision and time, Go version",
		Long: `Prints what this coordctl binary was built from, read from the build
information Go embeds: the module version ((devel) when built from a
checkout), the commit, its time, whether the work tree had uncommitted
changes ("-modified"), and the Go version. Builds without VCS information
(go run, -buildvcs=false) show no revision. 'coordd --version' prints the
same for a node.`,
		Example:     "  coordctl version\n  coordctl -o json version",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{offline: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := buildinfo.Read()
			if a.output == "json" {
				b, err := json.MarshalIndent(info, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.out, "%s\n", b)
				return err
			}
			_, err := fmt.Fprintln(a.out, info.String("coordctl"))
			return err
		},
	}
}
