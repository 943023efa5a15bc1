//go:build integration

package blob_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

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
	s, err := blob.OpenURL(t.Context(), "s3://"+cfg.Bucket+"?"+blobtest.S3Query(cfg)+"&region=us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	// A second store on the now existing bucket sees the object.
	s2, err := blob.OpenURL(t.Context(), "s3://"+cfg.Bucket+"?"+blobtest.S3Query(cfg))
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

// TestS3MultipartAndAbort checks what the conformance suite cannot see
// through the Store interface: a large Writer really uploads in parts, and
// Abort leaves no unfinished upload behind on the server.
func TestS3MultipartAndAbort(t *testing.T) {
	cfg := blobtest.S3Config(t)
	s, err := blob.NewS3(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := blobtest.MinioOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	core, err := minio.NewCore(cfg.Endpoint, opts)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 2*cfg.PartSize+1)
	for _, name := range []string{"committed", "aborted"} {
		w, err := s.Create(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		if name == "aborted" {
			err = w.Abort()
		} else {
			err = w.Close()
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	info, err := core.StatObject(t.Context(), cfg.Bucket, "committed", minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A multipart object's ETag ends in -<number of parts>.
	if !strings.HasSuffix(info.ETag, "-3") || info.Size != int64(len(data)) {
		t.Errorf("committed object: ETag %q, size %d; want a 3-part object of %d bytes", info.ETag, info.Size, len(data))
	}
	uploads, err := core.ListMultipartUploads(t.Context(), cfg.Bucket, "", "", "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(uploads.Uploads) != 0 {
		t.Errorf("unfinished uploads after Close and Abort: %+v", uploads.Uploads)
	}
	if _, err := s.Get(t.Context(), "aborted"); !blob.IsNotExist(err) {
		t.Errorf("Get(aborted) = %v, want ErrNotExist", err)
	}
}

// TestS3ReadAfterOverwrite checks that an open Object never mixes versions:
// once its name is overwritten, reads fail instead of returning new bytes.
func TestS3ReadAfterOverwrite(t *testing.T) {
	s := blobtest.NewS3(t)
	if err := s.Put(t.Context(), "o", []byte("old version")); err != nil {
		t.Fatal(err)
	}
	obj, err := s.Open(t.Context(), "o")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if err := s.Put(t.Context(), "o", []byte("NEW VERSION")); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 3)
	if n, err := obj.ReadAt(p, 0); err == nil {
		t.Fatalf("ReadAt after overwrite = %q, nil; want an error", p[:n])
	}
}

// TestS3BucketMustExist: a store opened to be read fails on a missing
// bucket, naming it as not existing, and does not create it; once the
// bucket exists it opens.
func TestS3BucketMustExist(t *testing.T) {
	cfg := blobtest.S3Config(t)
	cfg.BucketMustExist = true
	for range 2 { // the first refusal created nothing
		_, err := blob.NewS3(t.Context(), cfg)
		if !errors.Is(err, blob.ErrNotExist) || !strings.Contains(err.Error(), cfg.Bucket) {
			t.Fatalf("NewS3 of a missing bucket that must exist: %v, want an ErrNotExist naming %s", err, cfg.Bucket)
		}
	}
	cfg.BucketMustExist = false
	if _, err := blob.NewS3(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	cfg.BucketMustExist = true
	if _, err := blob.NewS3(t.Context(), cfg); err != nil {
		t.Fatalf("NewS3 of an existing bucket that must exist: %v", err)
	}
}
