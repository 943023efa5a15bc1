//go:build integration

package blob_test

import (
	"context"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/blob/blobtest"
)

// TestS3TLSVerifiesTheServer: the test MinIO speaks HTTPS with a
// certificate of a private CA. With that CA the store works; with the
// system roots (no CA) or in plain HTTP, it does not, and a CA without
// secure=true is refused before any request.
func TestS3TLSVerifiesTheServer(t *testing.T) {
	cfg := blobtest.S3Config(t)
	if !cfg.Secure || cfg.CAFile == "" {
		t.Fatalf("the test MinIO must speak HTTPS with a private CA: set %s (deploy/test.sh does)", blobtest.EnvS3CA)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := blob.NewS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	noCA, plain, caNoTLS := cfg, cfg, cfg
	noCA.CAFile = ""
	plain.Secure, plain.CAFile = false, ""
	caNoTLS.Secure = false
	for name, c := range map[string]blob.S3Config{
		"HTTPS without the private CA":   noCA,
		"plain HTTP to the HTTPS server": plain,
		"a CA with secure=false":         caNoTLS,
	} {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := blob.NewS3(cctx, c)
		cancel()
		if err == nil {
			t.Errorf("%s: the store opened", name)
		}
	}
}
