//go:build integration

package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/security/certs"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/blob/blobtest"
	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/gateways"
)

// TestAuthWholeAPIThroughGateway runs TestAuthWholeAPI's table — every
// RPC of the data, admin, locality-group and script services — through a
// cluster's gateway: a master and two tablet servers on the Consul agent
// deploy/test.sh started (ACLs on, default deny; the roles hold only the
// minimal-policy token) and its MinIO over HTTPS. Every call enters
// through one tablet server: data calls it serves or forwards, the admin
// API it relays to the master, whose guard decides. Clients connect over
// TLS; without credentials, or with a wrong, forged or expired token, a
// call is UNAUTHENTICATED. Two clusters:
//
//   - mutual TLS: the servers call each other with their certificate (CN
//     tabula-server, a superuser and forwarder); client certificates are
//     optional (ClientCertOptional), so callers with tokens only reach the
//     guard; "admin" authenticates with its client certificate (CN admin,
//     OU table-admins); a client certificate of another CA, or an expired
//     one, is refused by the handshake;
//   - tokens only: no client certificate anywhere; the servers prove who
//     they are with their server token (AuthConfig.ServerToken, principal
//     tabula-server).
//
// Then checkSessionCalls: calls on sessions, decided through the gateway
// as their classic calls.
func TestAuthWholeAPIThroughGateway(t *testing.T) {
	t.Run("mutual TLS", func(t *testing.T) {
		e := startAuthCluster(t, true)
		checkWholeAPI(t, e)
		checkSessionCalls(t, e)
		checkListGateways(t, e)
	})
	t.Run("tokens only", func(t *testing.T) {
		e := startAuthCluster(t, false)
		checkWholeAPI(t, e)
		checkSessionCalls(t, e)
		checkListGateways(t, e)
	})
}

// checkListGateways: the Locator's list of tablet servers is for
// authenticated callers (its rule is GetRoot's), and a connection of
// storage/gateways made with a caller's credentials lists and uses both
// servers.
func checkListGateways(t *testing.T, e *authEnv) {
	t.Helper()
	ctx := context.Background()
	want := slices.Sorted(slices.Values(e.servers))
	if _, err := clusterpb.NewLocatorClient(e.conns["none"]).ListGateways(ctx, &clusterpb.ListGatewaysRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ListGateways without credentials: %v, want UNAUTHENTICATED", err)
	}
	resp, err := clusterpb.NewLocatorClient(e.conns["root"]).ListGateways(ctx, &clusterpb.ListGatewaysRequest{})
	if err != nil || !slices.Equal(resp.GetAddrs(), want) {
		t.Fatalf("ListGateways as root: %v, %v; want %v", resp.GetAddrs(), err, want)
	}
	conn, err := gateways.Dial(e.servers[:1], append([]grpc.DialOption{e.transport}, e.creds["root"]...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Both servers answer calls made on it: each call names its peer.
	seen := map[string]bool{}
	for deadline := time.Now().Add(10 * time.Second); len(seen) < len(want); {
		if time.Now().After(deadline) {
			t.Fatalf("calls through gateways reached %v, want every server of %v", seen, want)
		}
		var p peer.Peer
		if _, err := clusterpb.NewLocatorClient(conn).GetRoot(ctx, &clusterpb.GetRootRequest{}, grpc.Peer(&p)); err != nil {
			t.Fatalf("GetRoot through gateways: %v", err)
		}
		seen[p.Addr.String()] = true
	}
}

// startAuthCluster starts the cluster of TestAuthWholeAPIThroughGateway,
// with mutual TLS between the servers or with tokens only, and returns its
// environment.
func startAuthCluster(t *testing.T, mtls bool) *authEnv {
	consulAddr, consulToken := os.Getenv("TABULA_TEST_CONSUL_ADDR"), os.Getenv("TABULA_TEST_CONSUL_TOKEN")
	if consulAddr == "" || consulToken == "" || os.Getenv(blobtest.EnvS3CA) == "" {
		t.Fatal("TABULA_TEST_CONSUL_ADDR, TABULA_TEST_CONSUL_TOKEN and TABULA_TEST_S3_CA are not set: run the integration tests through deploy/test.sh, which starts Consul with ACLs and MinIO over HTTPS")
	}
	ctx := context.Background()
	dir := t.TempDir()
	ca, err := certs.Generate(filepath.Join(dir, "tls"), certs.Spec{Clients: []certs.ClientSpec{{Principal: "admin", Groups: []string{"table-admins"}}}})
	if err != nil {
		t.Fatal(err)
	}
	tlsDir := filepath.Join(dir, "tls")
	caFile := filepath.Join(tlsDir, certs.CAFile)
	files := tlsconfig.RoleFiles{CertFile: filepath.Join(tlsDir, certs.ServerFile), KeyFile: filepath.Join(tlsDir, certs.ServerKeyFile), CAFile: caFile}
	if mtls {
		files.ClientCAFile, files.ClientCertOptional = caFile, true
	}
	role, err := tlsconfig.ForRole(files)
	if err != nil {
		t.Fatal(err)
	}
	env, authn := newAuthEnv(t, dir, "tabula-server", "root")
	authCfg := &AuthConfig{Authenticator: authn, Superusers: []string{"user:root", "user:tabula-server"}, CacheTTL: time.Millisecond}
	if !mtls {
		authCfg.ServerToken = env.tokens["tabula-server"]
	}
	log := slog.New(slog.NewJSONHandler(env.logs, nil))
	store := blobtest.NewS3(t)
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	prefix := coord.ClusterPrefix("auth-gw-" + hex.EncodeToString(nonce[:]))
	newCoord := func() coord.Service {
		kv, err := coord.NewConsul(coord.ConsulConfig{Address: consulAddr, Prefix: prefix, Token: consulToken})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { kv.Close() })
		return kv
	}
	m, err := StartMaster(ctx, MasterConfig{Coord: newCoord(), Store: store, Addr: "127.0.0.1:0", TLS: role, Auth: authCfg, Logger: log,
		Tick: 100 * time.Millisecond, GCInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	var servers []string
	for range 2 {
		s, err := StartTabletServer(ctx, ServerConfig{Coord: newCoord(), Store: store, Addr: "127.0.0.1:0", TLS: role, Auth: authCfg, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		servers = append(servers, s.Addr())
	}
	// The master leads and METADATA is served (before, CreateTable
	// answers UNAVAILABLE).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, _ := m.masterStatus(ctx)
		served := 0
		for _, s := range st.Servers {
			served += len(s.Tablets)
		}
		if st.Active && served > 0 && len(st.Unassigned) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("METADATA not served within 30 s: %+v", st)
		}
	}

	// Clients: TLS verifying the servers, no client certificate unless
	// named.
	clientTLS := func(certFile, keyFile string) grpc.DialOption {
		c, err := tlsconfig.Client(tlsconfig.Files{CAFile: caFile, CertFile: certFile, KeyFile: keyFile})
		if err != nil {
			t.Fatal(err)
		}
		return tlsconfig.DialOption(c)
	}
	env.addr, env.transport, env.servers = servers[0], clientTLS("", ""), servers
	if !mtls {
		env.connect(t)
		return env
	}
	env.creds["admin"] = []grpc.DialOption{clientTLS(certs.ClientFiles(tlsDir, "admin"))}
	// Refused by the handshake: root's certificate from another CA, and
	// one of this CA that has expired.
	other := filepath.Join(dir, "other")
	if _, err := certs.Generate(other, certs.Spec{Clients: []certs.ClientSpec{{Principal: "root"}}}); err != nil {
		t.Fatal(err)
	}
	env.creds["foreign-cert"] = []grpc.DialOption{clientTLS(certs.ClientFiles(other, "root"))}
	expired, err := ca.Client("root", nil, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	expiredCert, expiredKey := filepath.Join(dir, "expired.crt"), filepath.Join(dir, "expired.key")
	if err := expired.WriteFiles(expiredCert, expiredKey); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	env.creds["expired-cert"] = []grpc.DialOption{clientTLS(expiredCert, expiredKey)}
	env.refused["foreign-cert"], env.refused["expired-cert"] = codes.OK, codes.OK
	env.connect(t)
	return env
}
