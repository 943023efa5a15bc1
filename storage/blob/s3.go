package blob

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3 part sizes. S3 rejects parts other than the last below 5 MiB.
const (
	MinS3PartSize     = 5 << 20
	DefaultS3PartSize = 16 << 20
)

// abortTimeout bounds the clean-up of a failed or aborted multipart upload,
// which runs even when the writer's context is already cancelled.
const abortTimeout = 30 * time.Second

// S3Config configures a Store on an S3-compatible service (S3, MinIO).
type S3Config struct {
	// Endpoint is host:port of the service, without a scheme.
	Endpoint string
	// Bucket holds the objects. NewS3 creates it if it is missing, unless
	// BucketMustExist.
	Bucket string
	// BucketMustExist makes NewS3 fail on a missing bucket (an error
	// wrapping ErrNotExist) instead of creating it: for a store that is
	// only read, where a misspelt bucket must not appear empty.
	BucketMustExist bool
	// AccessKey and SecretKey are the static credentials to sign with.
	AccessKey, SecretKey string
	// Secure selects HTTPS.
	Secure bool
	// CAFile, when set with Secure, holds the PEM CA certificates the
	// service's certificate is verified with instead of the system roots
	// (a MinIO with a private CA).
	CAFile string
	// Region of the bucket; empty lets the client discover it (MinIO
	// ignores it).
	Region string
	// PartSize is the size of the parts a Writer uploads and the threshold
	// above which Put uses a multipart upload. Zero means
	// DefaultS3PartSize; otherwise at least MinS3PartSize. A Writer holds
	// up to two parts in memory.
	PartSize int64
}

// NewS3 returns a Store that keeps objects in cfg.Bucket, creating the
// bucket if it does not exist (tolerating a concurrent creator).
//
// Put is one PUT, or a multipart upload above PartSize; a Writer uploads
// parts of PartSize while the caller writes and completes the upload on
// Close (a small object is a single PUT). Objects are visible only when
// complete, so readers never see a partial object. An Object reads by
// ranged GETs pinned to the ETag the object had when opened: if the name is
// overwritten afterwards, reads fail rather than mix two versions.
//
// Delete checks that the object exists first (S3 deletes silently), so a
// concurrent delete of the same name may make both calls succeed.
func NewS3(ctx context.Context, cfg S3Config) (Store, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("blob: s3: empty endpoint")
	}
	if strings.Contains(cfg.Endpoint, "://") {
		return nil, fmt.Errorf("blob: s3: endpoint %q must be host:port without a scheme (use Secure for https)", cfg.Endpoint)
	}
	if cfg.Bucket == "" {
		return nil, errors.New("blob: s3: empty bucket name")
	}
	switch {
	case cfg.PartSize == 0:
		cfg.PartSize = DefaultS3PartSize
	case cfg.PartSize < MinS3PartSize:
		return nil, fmt.Errorf("blob: s3: part size %d below the S3 minimum of %d bytes", cfg.PartSize, MinS3PartSize)
	}
	opts := &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: cfg.Secure,
		Region: cfg.Region,
	}
	if cfg.CAFile != "" {
		if !cfg.Secure {
			return nil, fmt.Errorf("blob: s3: a CA (%s) without secure=true: the endpoint is plain HTTP", cfg.CAFile)
		}
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("blob: s3: CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("blob: s3: CA %s holds no PEM certificate", cfg.CAFile)
		}
		tr, err := minio.DefaultTransport(true)
		if err != nil {
			return nil, fmt.Errorf("blob: s3: %w", err)
		}
		tr.TLSClientConfig.RootCAs = pool
		opts.Transport = tr
	}
	core, err := minio.NewCore(cfg.Endpoint, opts)
	if err != nil {
		return nil, fmt.Errorf("blob: s3 %s: %w", cfg.Endpoint, err)
	}
	s := &s3Store{core: core, bucket: cfg.Bucket, partSize: cfg.PartSize,
		unsignedPayload: !cfg.Secure && isLoopback(cfg.Endpoint), mustExist: cfg.BucketMustExist}
	if err := s.ensureBucket(ctx, cfg.Region); err != nil {
		return nil, fmt.Errorf("blob: s3 %s bucket %q: %w", cfg.Endpoint, cfg.Bucket, err)
	}
	return s, nil
}

type s3Store struct {
	core     *minio.Core
	bucket   string
	partSize int64
	// mustExist: S3Config.BucketMustExist.
	mustExist bool
	// unsignedPayload sends uploads as UNSIGNED-PAYLOAD instead of
	// signing each 64 KiB chunk with its SHA-256 (aws-chunked), which
	// minio-go does over plain HTTP and the server checks: on a loopback
	// endpoint no network lies between the two to tamper with a body, and
	// that hashing on both sides was an eighth of a tablet server's CPU
	// under bulk writes (every commit-log object and SSTable goes up this
	// way). Over HTTPS minio-go sends unsigned payloads anyway (TLS
	// protects them); over plain HTTP to another host the chunks stay
	// signed. The request itself (headers, object name) is signed either
	// way, and the log's frames and SSTable blocks carry their own
	// checksums.
	unsignedPayload bool
}

// isLoopback reports whether endpoint (host:port) names the loopback
// interface: localhost or a loopback IP address.
func isLoopback(endpoint string) bool {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		host = endpoint
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// putOptions are the options of a PUT of an object of this store.
func (s *s3Store) putOptions() minio.PutObjectOptions {
	return minio.PutObjectOptions{ContentType: "application/octet-stream", DisableContentSha256: s.unsignedPayload}
}

// withPartSize is opts with the store's part size.
func (s *s3Store) withPartSize(opts minio.PutObjectOptions) minio.PutObjectOptions {
	opts.PartSize = uint64(s.partSize)
	return opts
}

// s3StartupWait bounds how long NewS3 waits for a store that answers but
// is still starting (MinIO's "Server not initialized yet", a 503): a
// server started next to its store, by hand or by a supervisor, comes up
// instead of exiting. A store that does not answer at all fails at once.
var s3StartupWait = 30 * time.Second

// ensureBucket is ensureBucketOnce, tried again with backoff while the
// store says it is starting (transientS3), for at most s3StartupWait.
// minio-go retries such answers itself for most requests, but not for
// the bucket-location lookup a first request makes.
func (s *s3Store) ensureBucket(ctx context.Context, region string) error {
	deadline := time.Now().Add(s3StartupWait)
	delay := 50 * time.Millisecond
	for {
		err := s.ensureBucketOnce(ctx, region)
		if err == nil || !transientS3(err) || time.Now().Add(delay).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// transientS3 reports whether err is a store's answer that it cannot
// serve yet but will: service unavailable, slow down, MinIO still
// starting.
func transientS3(err error) bool {
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "XMinioServerNotInitialized", "SlowDown", "ServiceUnavailable":
		return true
	}
	return resp.StatusCode == http.StatusServiceUnavailable
}

// errNoBucket is NewS3's error for a missing bucket that must exist: it
// matches ErrNotExist, and says "no such bucket" (ErrNotExist's own text
// is about files).
type errNoBucket struct{}

func (errNoBucket) Error() string        { return "no such bucket" }
func (errNoBucket) Is(target error) bool { return target == ErrNotExist }

func (s *s3Store) ensureBucketOnce(ctx context.Context, region string) error {
	ok, err := s.core.BucketExists(ctx, s.bucket)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	if s.mustExist {
		return errNoBucket{}
	}
	err = s.core.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: region})
	if err == nil {
		return nil
	}
	// Someone else may have created it since we looked.
	if ok, err2 := s.core.BucketExists(ctx, s.bucket); err2 == nil && ok {
		return nil
	}
	return err
}

// mapErr turns a minio-go error into a blob error: a missing key wraps
// ErrNotExist. A missing bucket does not: that is a configuration error,
// not an absent object.
func (s *s3Store) mapErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	resp := minio.ToErrorResponse(err)
	if resp.Code == "NoSuchKey" || (resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket") {
		return notExist(op, name)
	}
	return &OpError{Op: op, Name: name, Err: err}
}

func (s *s3Store) Put(ctx context.Context, name string, data []byte) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	_, err := s.core.Client.PutObject(ctx, s.bucket, name, bytes.NewReader(data), int64(len(data)),
		s.withPartSize(s.putOptions()))
	return s.mapErr("put", name, err)
}

func (s *s3Store) GetVersion(ctx context.Context, name string) ([]byte, Version, error) {
	data, info, err := s.get(ctx, name)
	if err != nil {
		return nil, "", err
	}
	return data, Version(info.ETag), nil
}

// PutIfVersion is a conditional PUT (If-Match: the ETag, or If-None-Match:
// * for an absent object); the service decides atomically. Objects this
// large go up in one PUT whatever PartSize says: a multipart upload's
// completion is not conditional.
func (s *s3Store) PutIfVersion(ctx context.Context, name string, data []byte, v Version) (Version, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	opts := s.putOptions()
	opts.DisableMultipart = true
	if v == "" {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(string(v))
	}
	info, err := s.core.Client.PutObject(ctx, s.bucket, name, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		// If-Match on an absent object answers NoSuchKey.
		if resp := minio.ToErrorResponse(err); resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed" ||
			IsNotExist(s.mapErr("put", name, err)) {
			return "", versionMismatch(name)
		}
		return "", s.mapErr("put", name, err)
	}
	return Version(info.ETag), nil
}

func (s *s3Store) Create(ctx context.Context, name string) (Writer, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &s3Writer{s: s, ctx: ctx, name: name, buf: make([]byte, 0, s.partSize)}, nil
}

func (s *s3Store) Open(ctx context.Context, name string) (Object, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	info, err := s.core.StatObject(ctx, s.bucket, name, minio.StatObjectOptions{})
	if err != nil {
		return nil, s.mapErr("open", name, err)
	}
	// The Object outlives this call, so its reads use a context of their
	// own making; the values of ctx (tracing, credentials) carry over.
	return &s3Object{s: s, ctx: context.WithoutCancel(ctx), name: name, size: info.Size, etag: info.ETag}, nil
}

func (s *s3Store) Get(ctx context.Context, name string) ([]byte, error) {
	data, _, err := s.get(ctx, name)
	return data, err
}

// get reads a whole object with one GET, which also gives its ETag.
func (s *s3Store) get(ctx context.Context, name string) ([]byte, minio.ObjectInfo, error) {
	if err := ValidateName(name); err != nil {
		return nil, minio.ObjectInfo{}, err
	}
	body, info, _, err := s.core.GetObject(ctx, s.bucket, name, minio.GetObjectOptions{})
	if err != nil {
		return nil, info, s.mapErr("get", name, err)
	}
	defer body.Close()
	data := make([]byte, info.Size)
	if _, err := io.ReadFull(body, data); err != nil {
		return nil, info, &OpError{Op: "get", Name: name, Err: err}
	}
	return data, info, nil
}

func (s *s3Store) List(ctx context.Context, prefix string) ([]Attrs, error) {
	if prefixMatchesNothing(prefix) {
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the listing goroutine if we return early
	var out []Attrs
	for info := range s.core.Client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if info.Err != nil {
			return nil, &OpError{Op: "list", Name: prefix, Err: info.Err}
		}
		out = append(out, Attrs{Name: info.Key, Size: info.Size})
	}
	// S3 lists in byte order already; other services may not.
	slices.SortFunc(out, func(a, b Attrs) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (s *s3Store) Delete(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if _, err := s.core.StatObject(ctx, s.bucket, name, minio.StatObjectOptions{}); err != nil {
		return s.mapErr("delete", name, err)
	}
	err := s.core.RemoveObject(ctx, s.bucket, name, minio.RemoveObjectOptions{})
	return s.mapErr("delete", name, err)
}

type s3Object struct {
	s    *s3Store
	ctx  context.Context
	name string
	size int64
	etag string
}

func (o *s3Object) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &OpError{Op: "read", Name: o.name, Err: errors.New("negative offset")}
	}
	if off >= o.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := min(int64(len(p)), o.size-off)
	if want == 0 {
		return 0, nil
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+want-1); err != nil {
		return 0, &OpError{Op: "read", Name: o.name, Err: err}
	}
	if o.etag != "" {
		if err := opts.SetMatchETag(o.etag); err != nil {
			return 0, &OpError{Op: "read", Name: o.name, Err: err}
		}
	}
	body, _, _, err := o.s.core.GetObject(o.ctx, o.s.bucket, o.name, opts)
	if err != nil {
		if minio.ToErrorResponse(err).Code == "PreconditionFailed" {
			err = fmt.Errorf("object replaced since it was opened: %w", err)
		}
		return 0, o.s.mapErr("read", o.name, err)
	}
	defer body.Close()
	n, err := io.ReadFull(body, p[:want])
	if err != nil {
		return n, &OpError{Op: "read", Name: o.name, Err: err}
	}
	if want < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

func (o *s3Object) Size() int64  { return o.size }
func (o *s3Object) Close() error { return nil }

// s3Writer buffers one part while the previous one uploads, so the caller
// and the network work at the same time.
type s3Writer struct {
	s    *s3Store
	ctx  context.Context
	name string

	buf      []byte // the part being filled, cap = part size
	spare    []byte // a buffer no upload uses any more
	uploadID string // "" until the first full part
	parts    []minio.CompletePart
	inflight chan partResult // result of the part uploading, nil if none
	err      error           // first failure; the writer is then useless
	done     bool
}

type partResult struct {
	part minio.ObjectPart
	buf  []byte
	err  error
}

func (w *s3Writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriterDone(w.name)
	}
	if w.err != nil {
		return 0, w.err
	}
	written := 0
	for len(p) > 0 {
		n := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:n]...)
		p = p[n:]
		written += n
		if len(w.buf) == cap(w.buf) {
			if err := w.startPart(); err != nil {
				w.err = err
				return written, err
			}
		}
	}
	return written, nil
}

// startPart hands the full buffer to a background upload, after waiting
// for the one before it.
func (w *s3Writer) startPart() error {
	if w.uploadID == "" {
		id, err := w.s.core.NewMultipartUpload(w.ctx, w.s.bucket, w.name,
			minio.PutObjectOptions{ContentType: "application/octet-stream"})
		if err != nil {
			return &OpError{Op: "write", Name: w.name, Err: err}
		}
		w.uploadID = id
	}
	if err := w.wait(); err != nil {
		return err
	}
	number := len(w.parts) + 1
	data := w.buf
	ch := make(chan partResult, 1)
	go func() {
		part, err := w.s.core.PutObjectPart(w.ctx, w.s.bucket, w.name, w.uploadID, number,
			bytes.NewReader(data), int64(len(data)), minio.PutObjectPartOptions{DisableContentSha256: w.s.unsignedPayload})
		ch <- partResult{part: part, buf: data, err: err}
	}()
	w.inflight = ch
	if w.spare != nil {
		w.buf = w.spare[:0]
		w.spare = nil
	} else {
		w.buf = make([]byte, 0, cap(data))
	}
	return nil
}

// wait collects the upload in flight, if any.
func (w *s3Writer) wait() error {
	if w.inflight == nil {
		return nil
	}
	r := <-w.inflight
	w.inflight = nil
	w.spare = r.buf
	if r.err != nil {
		return &OpError{Op: "write", Name: w.name, Err: r.err}
	}
	w.parts = append(w.parts, completePart(r.part))
	return nil
}

func completePart(p minio.ObjectPart) minio.CompletePart {
	return minio.CompletePart{
		PartNumber:        p.PartNumber,
		ETag:              p.ETag,
		ChecksumCRC32:     p.ChecksumCRC32,
		ChecksumCRC32C:    p.ChecksumCRC32C,
		ChecksumSHA1:      p.ChecksumSHA1,
		ChecksumSHA256:    p.ChecksumSHA256,
		ChecksumCRC64NVME: p.ChecksumCRC64NVME,
	}
}

func (w *s3Writer) Close() error {
	if w.done {
		return errWriterDone(w.name)
	}
	if w.err != nil {
		w.abort()
		return w.err
	}
	if w.uploadID == "" {
		// Smaller than one part: a single PUT.
		w.done = true
		return w.s.Put(w.ctx, w.name, w.buf)
	}
	if err := w.wait(); err != nil {
		w.abort()
		return err
	}
	if len(w.buf) > 0 {
		part, err := w.s.core.PutObjectPart(w.ctx, w.s.bucket, w.name, w.uploadID, len(w.parts)+1,
			bytes.NewReader(w.buf), int64(len(w.buf)), minio.PutObjectPartOptions{DisableContentSha256: w.s.unsignedPayload})
		if err != nil {
			w.abort()
			return &OpError{Op: "close", Name: w.name, Err: err}
		}
		w.parts = append(w.parts, completePart(part))
	}
	w.done = true
	_, err := w.s.core.CompleteMultipartUpload(w.ctx, w.s.bucket, w.name, w.uploadID, w.parts,
		minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		w.abortUpload()
		return &OpError{Op: "close", Name: w.name, Err: err}
	}
	return nil
}

func (w *s3Writer) Abort() error {
	if w.done {
		return errWriterDone(w.name)
	}
	return w.abort()
}

func (w *s3Writer) abort() error {
	w.done = true
	w.wait() // its error no longer matters
	w.buf, w.spare = nil, nil
	return w.abortUpload()
}

// abortUpload discards the parts uploaded so far. It runs even when the
// writer's context is cancelled: otherwise the parts would linger, unseen
// but stored, until a bucket lifecycle rule removed them.
func (w *s3Writer) abortUpload() error {
	if w.uploadID == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), abortTimeout)
	defer cancel()
	if err := w.s.core.AbortMultipartUpload(ctx, w.s.bucket, w.name, w.uploadID); err != nil {
		return &OpError{Op: "abort", Name: w.name, Err: err}
	}
	return nil
}
