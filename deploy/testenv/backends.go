package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/tabuladb/tabula/security/certs"
)

// makeCerts writes a development CA and a server certificate for the
// loopback addresses into dir, and the server pair again under dir/minio
// with the names MinIO's --certs-dir wants.
func makeCerts(dir string) error {
	if _, err := certs.Generate(dir, certs.Spec{ServerName: "tabula-test-backend"}); err != nil {
		return err
	}
	mdir := filepath.Join(dir, "minio")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return err
	}
	for from, to := range map[string]string{certs.ServerFile: "public.crt", certs.ServerKeyFile: "private.key"} {
		b, err := os.ReadFile(filepath.Join(dir, from))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(mdir, to), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// consulACL creates the policy in policyFile and a token holding only it,
// with the management token mgmt, and returns the token's secret. The ACL
// system comes up a little after the leader is elected: calls are retried
// until timeout.
func consulACL(addr, mgmt, policyFile string, timeout time.Duration) (string, error) {
	rules, err := os.ReadFile(policyFile)
	if err != nil {
		return "", fmt.Errorf("consul-acl: %v", err)
	}
	cfg := api.DefaultConfig()
	cfg.Address = addr
	cfg.Token = mgmt
	client, err := api.NewClient(cfg)
	if err != nil {
		return "", fmt.Errorf("consul-acl: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		var policy *api.ACLPolicy
		policy, _, last = client.ACL().PolicyCreate(&api.ACLPolicy{Name: "tabula", Description: "Tabula's minimal policy (deploy/consul-policy.hcl)", Rules: string(rules)}, (&api.WriteOptions{}).WithContext(ctx))
		if last == nil {
			var tok *api.ACLToken
			tok, _, last = client.ACL().TokenCreate(&api.ACLToken{Description: "tabula integration tests", Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}, (&api.WriteOptions{}).WithContext(ctx))
			if last == nil {
				return tok.SecretID, nil
			}
			// A policy exists now: a retry would fail on its name.
			return "", fmt.Errorf("consul-acl: token: %v", last)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("consul-acl: ACL system not ready after %v: %v", timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
