package blob_test

import (
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
)

func TestOpenURLFile(t *testing.T) {
	dir := t.TempDir()
	s, err := blob.OpenURL(t.Context(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	s2, err := blob.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s2.Get(t.Context(), "x"); err != nil || string(got) != "1" {
		t.Fatalf("object written through the file URL: %q, %v", got, err)
	}
}

func TestOpenURLErrors(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	tests := []struct{ url, want string }{
		{"", "no scheme"},
		{"/tmp/x", "no scheme"},
		{"gs://bucket", "unsupported scheme"},
		{"file:relative/path", "absolute"},
		{"file://host/tmp/x", "host"},
		{"file:///tmp/x?sync=no", "no query"},
		{"s3://", "no bucket"},
		{"s3://bucket/prefix?endpoint=h:1", "prefixes"},
		{"s3://bucket?endpoint=h:1&secure=maybe", "secure"},
		{"s3://bucket?endpoint=h:1&endpont=h:2", "unknown parameter"},
		{"s3://bucket?endpoint=h:1&endpoint=h:2", "2 times"},
		{"s3://bucket?endpoint=h:1&part_size=-5", "part_size"},
		{"s3://bucket?endpoint=h:1&secure=false", "AWS_ACCESS_KEY_ID"},
		{"s3://user:pw@bucket?endpoint=h:1", "user info"},
		{"::", "missing protocol scheme"},
	}
	for _, tt := range tests {
		_, err := blob.OpenURL(t.Context(), tt.url)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("OpenURL(%q) = %v, want an error containing %q", tt.url, err, tt.want)
		}
	}
}

func TestNewS3ConfigErrors(t *testing.T) {
	tests := []struct {
		cfg  blob.S3Config
		want string
	}{
		{blob.S3Config{Bucket: "b"}, "empty endpoint"},
		{blob.S3Config{Endpoint: "http://h:1", Bucket: "b"}, "without a scheme"},
		{blob.S3Config{Endpoint: "h:1"}, "empty bucket"},
		{blob.S3Config{Endpoint: "h:1", Bucket: "b", PartSize: 1 << 20}, "part size"},
	}
	for _, tt := range tests {
		_, err := blob.NewS3(t.Context(), tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewS3(%+v) = %v, want an error containing %q", tt.cfg, err, tt.want)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, name := range []string{"a", "a/b", "tables/t1/tablets/00a/sst/000012.sst", "a.b/.c/d..", strings.Repeat("x", 1024)} {
		if err := blob.ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{"", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b", "a\\b", "a\x00", strings.Repeat("x", 1025)} {
		if err := blob.ValidateName(name); err == nil {
			t.Errorf("ValidateName(%q) = nil, want an error", name)
		}
	}
}
