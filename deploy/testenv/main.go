// Command testenv holds the small, portable helpers deploy/test.sh needs to
// run servers for the integration tests, so that the script depends on no
// tool beyond bash and Go:
//
//	testenv free-ports N           print N distinct free TCP ports on 127.0.0.1, one a line
//	testenv wait-http URL TIMEOUT [CA [CERT KEY]]
//	                               wait until GET URL answers 200 (TIMEOUT as in 30s;
//	                               an https URL is verified with the PEM CA file CA, and
//	                               the client certificate CERT/KEY presented if given)
//	testenv certs DIR              write a CA (ca.crt) and a server certificate for 127.0.0.1
//	                               and localhost (server.crt, server.key) into DIR, and the
//	                               same pair as MinIO reads it (DIR/minio/public.crt, private.key)
//	testenv consul-acl ADDR MGMT POLICY TIMEOUT
//	                               with the management token MGMT, create on the Consul agent at
//	                               ADDR a policy from the HCL file POLICY and a token holding
//	                               only it; print the token's secret (waits for the ACL system)
//
// Exit status 0 on success, 1 on failure with the reason on stderr.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/tabuladb/tabula/security/tlsconfig"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: testenv free-ports N | wait-http URL TIMEOUT")
	}
	switch args[0] {
	case "free-ports":
		if len(args) != 2 {
			return fmt.Errorf("usage: testenv free-ports N")
		}
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 1 {
			return fmt.Errorf("free-ports: bad count %q", args[1])
		}
		ports, err := freePorts(n)
		if err != nil {
			return err
		}
		for _, p := range ports {
			fmt.Println(p)
		}
		return nil
	case "wait-http":
		if len(args) != 3 && len(args) != 4 && len(args) != 6 {
			return fmt.Errorf("usage: testenv wait-http URL TIMEOUT [CA [CERT KEY]]")
		}
		timeout, err := time.ParseDuration(args[2])
		if err != nil {
			return fmt.Errorf("wait-http: bad timeout %q: %v", args[2], err)
		}
		var files tlsconfig.Files
		if len(args) >= 4 {
			files.CAFile = args[3]
		}
		if len(args) == 6 {
			files.CertFile, files.KeyFile = args[4], args[5]
		}
		return waitHTTP(args[1], timeout, files)
	case "certs":
		if len(args) != 2 {
			return fmt.Errorf("usage: testenv certs DIR")
		}
		return makeCerts(args[1])
	case "consul-acl":
		if len(args) != 5 {
			return fmt.Errorf("usage: testenv consul-acl ADDR MGMT POLICY TIMEOUT")
		}
		timeout, err := time.ParseDuration(args[4])
		if err != nil {
			return fmt.Errorf("consul-acl: bad timeout %q: %v", args[4], err)
		}
		token, err := consulACL(args[1], args[2], args[3], timeout)
		if err != nil {
			return err
		}
		fmt.Println(token)
		return nil
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// freePorts asks the kernel for n ports by listening on port 0. All n
// listeners stay open until every port is chosen, so the ports differ; a
// server started afterwards can still lose a port to another process in
// the meantime, which the caller handles by retrying.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free-ports: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitHTTP polls url until it answers 200 OK or timeout passes.
func waitHTTP(url string, timeout time.Duration, files tlsconfig.Files) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	if files.CAFile != "" {
		tc, err := tlsconfig.Client(files)
		if err != nil {
			return fmt.Errorf("wait-http: %v", err)
		}
		client.Transport = &http.Transport{TLSClientConfig: tc}
	}
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("wait-http: %v", err)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else if ctx.Err() == nil || last == "" {
			// A request cut short by our own deadline says nothing about
			// the server: keep the last answer it gave, if any.
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait-http: %s not healthy after %s (last: %s)", url, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
