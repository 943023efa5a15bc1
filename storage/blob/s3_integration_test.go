//go:build integration

package blob_test

import (
	"context"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/blob/blobtest"
)

func TestS3Conformance(t *testing.T) {
	blobtest.RunConformance(t, func(t *testing.T) blob.Store { return blobtest.NewS3(t) })
}

func TestS3OpenURL(t *testing.T) {
	cfg := blobtest.S3Config(t)
	t.Setenv("AWS_ACCESS_KEY_ID", cfg.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", cfg.SecretKey)
	s, err := blob.OpenURL(t.Context(), "s3://"+cfg.Bucket+"?endpoint="+cfg.Endpoint+"&secure=false&region=us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	// A second store on the now existing bucket sees the object.
	s2, err := blob.OpenURL(t.Context(), "s3://"+cfg.Bucket+"?endpoint="+cfg.Endpoint+"&secure=false")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s2.Get(t.Context(), "x"); err != nil || string(got) != "1" {
		t.Fatalf("Get through the second store = %q, %v", got, err)
	}
	if err := s2.Delete(t.Context(), "x"); err != nil {
		t.Fatal(err)
	}
}

func TestS3BadCredentials(t *testing.T) {
	cfg := blobtest.S3Config(t)
	cfg.SecretKey = "wrong-" + cfg.SecretKey
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := blob.NewS3(ctx, cfg); err == nil {
		t.Fatal("NewS3 with a wrong secret key succeeded")
	}
}
