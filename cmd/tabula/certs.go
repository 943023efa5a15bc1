package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tabuladb/tabula/security/certs"
)

func newCertsCommand() *cobra.Command {
	var (
		dir, serverName string
		hosts, clients  []string
		validFor        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a development CA, a server certificate and client certificates for TLS and mutual TLS",
		Long: `certs writes into --dir a certificate authority (ca.crt, ca.key; an existing
one in --dir is reused, so certificates made before stay valid), a server
certificate (server.crt, server.key) for localhost, 127.0.0.1, ::1 and
--hosts, and one client certificate per --client (client-NAME.crt/.key).

A client is NAME or NAME:GROUP1+GROUP2: the certificate's subject common
name is the principal NAME, its organizational units the groups. The server
certificate serves as a client certificate too (servers calling servers
over mutual TLS present it, as principal --server-name).

Serve with --tls-cert server.crt --tls-key server.key [--tls-client-ca
ca.crt]; connect with --tls-ca ca.crt [--tls-cert client-NAME.crt --tls-key
client-NAME.key]. Keep ca.key secret: whoever holds it can mint any
principal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec := certs.Spec{ServerName: serverName, Hosts: hosts, ValidFor: validFor}
			for _, c := range clients {
				cs, err := parseClientSpec(c)
				if err != nil {
					return usagef(cmd, "--client: %v", err)
				}
				spec.Clients = append(spec.Clients, cs)
			}
			if validFor < 0 {
				return usagef(cmd, "--valid-for: %v is negative", validFor)
			}
			if _, err := certs.Generate(dir, spec); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s %s %s %s", dir, certs.CAFile, certs.CAKeyFile, certs.ServerFile, certs.ServerKeyFile)
			for _, c := range spec.Clients {
				fmt.Fprintf(cmd.OutOrStdout(), " client-%s.crt client-%s.key", c.Principal, c.Principal)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory to write the certificates into (required)")
	f.StringSliceVar(&hosts, "hosts", nil, "extra DNS names and IP addresses of the server certificate (localhost, 127.0.0.1 and ::1 are always in)")
	f.StringSliceVar(&clients, "client", nil, "client certificates to make: NAME or NAME:GROUP1+GROUP2 (repeatable)")
	f.StringVar(&serverName, "server-name", "tabula-server", "the server certificate's common name: the principal servers are to each other")
	f.DurationVar(&validFor, "valid-for", certs.DefaultValidity, "validity of each certificate made")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

// parseClientSpec parses NAME or NAME:GROUP1+GROUP2.
func parseClientSpec(s string) (certs.ClientSpec, error) {
	name, groups, hasGroups := strings.Cut(s, ":")
	if name == "" {
		return certs.ClientSpec{}, fmt.Errorf("%q: empty principal (want NAME or NAME:GROUP1+GROUP2)", s)
	}
	cs := certs.ClientSpec{Principal: name}
	if hasGroups {
		for _, g := range strings.Split(groups, "+") {
			if g == "" {
				return certs.ClientSpec{}, fmt.Errorf("%q: empty group name", s)
			}
			cs.Groups = append(cs.Groups, g)
		}
	}
	return cs, nil
}
