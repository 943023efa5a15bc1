package blobtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/blob"
)

// Environment variables that point integration tests at an S3 server.
// deploy/test.sh starts MinIO and sets them.
const (
	EnvS3Endpoint  = "TABULA_TEST_S3_ENDPOINT" // host:port
	EnvS3AccessKey = "TABULA_TEST_S3_ACCESS_KEY"
	EnvS3SecretKey = "TABULA_TEST_S3_SECRET_KEY"
	// EnvS3CA, when set, is the PEM CA file of a server that speaks HTTPS
	// (deploy/test.sh's MinIO does); unset, the server is plain HTTP.
	EnvS3CA = "TABULA_TEST_S3_CA"
)

// S3PartSize is the part size of the stores NewS3 returns: the S3 minimum,
// so that tests exercise multipart uploads with little data.
const S3PartSize = blob.MinS3PartSize

// S3Config returns the configuration of the test S3 server from the
// environment with a fresh, unique bucket name derived from t.Name(). It
// fails the test (never skips it) when the environment is missing: the
// integration tests that call it run only from deploy/test.sh, which
// provides the server. The bucket, if anything creates it, is removed with
// everything in it when the test ends.
func S3Config(t testing.TB) blob.S3Config {
	t.Helper()
	cfg := blob.S3Config{
		Endpoint:  os.Getenv(EnvS3Endpoint),
		AccessKey: os.Getenv(EnvS3AccessKey),
		SecretKey: os.Getenv(EnvS3SecretKey),
		Bucket:    bucketName(t.Name()),
		PartSize:  S3PartSize,
		CAFile:    os.Getenv(EnvS3CA),
	}
	cfg.Secure = cfg.CAFile != ""
	if cfg.Endpoint == "" || cfg.AccessKey == "" || cfg.SecretKey == "" {
		t.Fatalf("integration test needs an S3 server: set %s, %s and %s, or run deploy/test.sh, which starts MinIO and sets them",
			EnvS3Endpoint, EnvS3AccessKey, EnvS3SecretKey)
	}
	t.Cleanup(func() { removeBucket(t, cfg) })
	return cfg
}

// NewS3 returns a Store on a new, empty bucket of the test S3 server (see
// S3Config), with parts of S3PartSize. The bucket and everything in it are
// removed when the test ends.
func NewS3(t testing.TB) blob.Store {
	t.Helper()
	cfg := S3Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := blob.NewS3(ctx, cfg)
	if err != nil {
		t.Fatalf("blobtest.NewS3: %v", err)
	}
	return s
}

// removeBucket deletes a test bucket with its objects and unfinished
// uploads. Failure is only logged: the server's data directory is temporary
// anyway.
func removeBucket(t testing.TB, cfg blob.S3Config) {
	opts, err := MinioOptions(cfg)
	var client *minio.Client
	if err == nil {
		client, err = minio.New(cfg.Endpoint, opts)
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// ForceDelete is a MinIO extension; the test server is MinIO.
		err = client.RemoveBucketWithOptions(ctx, cfg.Bucket, minio.RemoveBucketOptions{ForceDelete: true})
	}
	if err != nil && minio.ToErrorResponse(err).Code != "NoSuchBucket" {
		t.Logf("blobtest: removing test bucket %s: %v", cfg.Bucket, err)
	}
}

// bucketName makes a valid S3 bucket name (3–63 characters of [a-z0-9-],
// starting and ending with a letter or digit) that says which test made it
// and is unique across runs.
func bucketName(testName string) string {
	var b strings.Builder
	b.WriteString("t-")
	dash := true
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	if !dash {
		b.WriteByte('-')
	}
	var random [8]byte
	rand.Read(random[:])
	b.WriteString(hex.EncodeToString(random[:]))
	return b.String()
}

// S3Query returns the query of an s3:// store URL (blob.OpenURL) for cfg:
// endpoint=HOST:PORT&secure=…, and ca=FILE for a server with a private CA.
func S3Query(cfg blob.S3Config) string {
	q := url.Values{"endpoint": {cfg.Endpoint}, "secure": {strconv.FormatBool(cfg.Secure)}}
	if cfg.CAFile != "" {
		q.Set("ca", cfg.CAFile)
	}
	return q.Encode()
}

// MinioOptions are the options of a minio-go client of the test server
// cfg describes (its credentials, and its CA over HTTPS), for tests that
// look at the bucket beside the Store.
func MinioOptions(cfg blob.S3Config) (*minio.Options, error) {
	opts := &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: cfg.Secure,
	}
	if cfg.CAFile != "" {
		tc, err := tlsconfig.Client(tlsconfig.Files{CAFile: cfg.CAFile})
		if err != nil {
			return nil, err
		}
		opts.Transport = &http.Transport{TLSClientConfig: tc}
	}
	return opts, nil
}
