package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/coordd/coordd/internal/devca"
)

// certs needs no cluster: it writes files.
func (a *app) certsCmd() *cobra.Command {
	c := group("certs", "Create a development CA and node/client certificates for mutual TLS (no openssl needed)",
		a.certsDevCmd(), a.certsInitCmd(), a.certsIssueCmd())
	c.Annotations = map[string]string{offline: "true"}
	for _, sub := range c.Commands() {
		sub.Annotations = map[string]string{offline: "true"}
	}
	return c
}

// offline marks commands that do not talk to a cluster.
const offline = "offline"

func (a *app) certsDevCmd() *cobra.Command {
	var (
		dir            string
		nodes, clients []string
		hosts          []string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Create a CA (unless DIR has one) and a certificate per node and client",
		Long: `Writes into DIR: ca.pem and ca-key.pem (the CA), <node>.pem and
<node>-key.pem for each node (identity = the node's Raft id, URI SAN
coordd://node/<id>; valid for serving and for connecting to peers, on
loopback and --host), and <client>.pem and <client>-key.pem for each
client identity (client authentication only). nodes.txt lists the node
ids: no client certificate may take one of them.`,
		Example: `  coordctl certs dev --dir ./certs --nodes n1,n2,n3 --clients admin,billing-worker,ledger-api`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := devca.Load(dir)
			if err != nil {
				if ca, err = devca.New("coordd-dev-ca"); err != nil {
					return err
				}
				if err := ca.Save(dir); err != nil {
					return err
				}
				fmt.Fprintf(a.out, "CA         %s\n", filepath.Join(dir, devca.CACert))
			}
			for _, n := range nodes {
				if err := a.issue(ca, dir, n, true, hosts); err != nil {
					return err
				}
			}
			for _, n := range clients {
				if err := a.issue(ca, dir, n, false, nil); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "./certs", "directory to write into")
	cmd.Flags().StringSliceVar(&nodes, "nodes", []string{"node1"}, "node ids (certificate identity = Raft id)")
	cmd.Flags().StringSliceVar(&clients, "clients", []string{"admin"}, "client identities")
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "extra IP addresses or DNS names for the node certificates")
	return cmd
}

func (a *app) certsInitCmd() *cobra.Command {
	var dir, name string
	cmd := &cobra.Command{
		Use:     "init",
		Short:   "Create a development CA in DIR",
		Example: `  coordctl certs init --dir ./certs`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := devca.New(name)
			if err != nil {
				return err
			}
			if err := ca.Save(dir); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "CA         %s\n", filepath.Join(dir, devca.CACert))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "./certs", "directory to write into")
	cmd.Flags().StringVar(&name, "name", "coordd-dev-ca", "CA common name")
	return cmd
}

func (a *app) certsIssueCmd() *cobra.Command {
	var (
		dir   string
		node  bool
		hosts []string
	)
	cmd := &cobra.Command{
		Use:   "issue IDENTITY",
		Short: "Issue a client (or, with --node, node) certificate signed by the CA in DIR",
		Long: `Issues IDENTITY.pem and IDENTITY-key.pem. A client certificate is for
client authentication only; it is refused for a name that is a node of
this CA (nodes.txt). A node certificate (--node) is the only kind a
cluster accepts as a member: on the Raft port, for forwarding, for
member-only calls (docs/security.md, "Certificate profiles").`,
		Example: `  coordctl certs issue billing-worker --dir ./certs
  coordctl certs issue n4 --node --host 10.0.0.4 --dir ./certs`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ca, err := devca.Load(dir)
			if err != nil {
				return err
			}
			return a.issue(ca, dir, args[0], node, hosts)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "./certs", "directory holding the CA")
	cmd.Flags().BoolVar(&node, "node", false, "a node certificate (server and peer use, URI SAN coordd://node/IDENTITY; identity must equal the node's Raft id)")
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "extra IP addresses or DNS names (node certificates)")
	return cmd
}

func (a *app) issue(ca *devca.CA, dir, name string, node bool, hosts []string) error {
	if strings.TrimSpace(name) == "" {
		return errors.New("empty identity")
	}
	if !node {
		// Membership is the node certificate's, not the name's: a client
		// certificate named after a node would be an ordinary identity
		// that reads like a member (in logs, leases, ACL rules).
		if isNode, err := devca.IsNode(dir, name); err != nil {
			return err
		} else if isNode {
			return fmt.Errorf("%q is a node of this CA (%s): a client certificate named after a node is not a member; "+
				"choose another client name, or issue a node certificate with --node", name, filepath.Join(dir, devca.NodeList))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, name+".pem")); err == nil {
		return fmt.Errorf("%s already exists; remove it to issue a new one", filepath.Join(dir, name+".pem"))
	}
	cert, key, err := ca.IssueTo(dir, name, node, hosts)
	if err != nil {
		return err
	}
	kind := "client"
	if node {
		kind = "node"
	}
	printCert(a.out, kind, cert, key)
	return nil
}

func printCert(w io.Writer, kind, cert, key string) {
	fmt.Fprintf(w, "%-10s %s  %s\n", kind, cert, key)
}
