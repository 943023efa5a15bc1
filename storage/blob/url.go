package blob

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
)

// BucketMustExist is an OpenURL option: a missing bucket is an error
// (S3Config.BucketMustExist), not created.
func BucketMustExist(c *S3Config) { c.BucketMustExist = true }

// OpenURL opens the Store a URL names:
//
//	file:///abs/path
//	    a local directory (NewLocal); the path must be absolute.
//	s3://BUCKET?endpoint=HOST:PORT[&secure=false][&region=R][&ca=FILE][&part_size=BYTES]
//	    an S3 or MinIO bucket (NewS3), created if missing. secure defaults to
//	    true; endpoint defaults to s3.amazonaws.com. ca names a PEM file of
//	    the CA certificates that sign the service's certificate (default
//	    AWS_CA_BUNDLE; the system roots when neither is set). Credentials
//	    come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, which must
//	    both be set.
//
// Unknown query parameters are errors, so a misspelt option is not silently
// ignored. Options adjust the S3 configuration the URL gives
// (BucketMustExist, for a store only read).
func OpenURL(ctx context.Context, rawURL string, opts ...func(*S3Config)) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("blob: store URL: %w", err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("blob: store URL %q: %s", rawURL, fmt.Sprintf(format, args...))
	}
	switch u.Scheme {
	case "file":
		if u.Opaque != "" || u.Path == "" || u.Path[0] != '/' {
			return nil, bad("want file:///absolute/path")
		}
		if u.Host != "" && u.Host != "localhost" {
			return nil, bad("file URLs name a local path; host %q is not supported", u.Host)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return nil, bad("file URLs take no query or fragment")
		}
		return NewLocal(u.Path)

	case "s3":
		if u.Host == "" {
			return nil, bad("no bucket: want s3://BUCKET?endpoint=HOST:PORT")
		}
		if u.Path != "" && u.Path != "/" {
			return nil, bad("object prefixes in the path (%q) are not supported", u.Path)
		}
		if u.User != nil || u.Fragment != "" {
			return nil, bad("s3 URLs take no user info or fragment; credentials come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
		}
		cfg := S3Config{Bucket: u.Host, Endpoint: "s3.amazonaws.com", Secure: true}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return nil, bad("query: %v", err)
		}
		for key, vals := range q {
			if len(vals) != 1 {
				return nil, bad("parameter %q given %d times", key, len(vals))
			}
			v := vals[0]
			switch key {
			case "endpoint":
				cfg.Endpoint = v
			case "secure":
				b, err := strconv.ParseBool(v)
				if err != nil {
					return nil, bad("secure=%q: want true or false", v)
				}
				cfg.Secure = b
			case "region":
				cfg.Region = v
			case "ca":
				cfg.CAFile = v
			case "part_size":
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n <= 0 {
					return nil, bad("part_size=%q: want a positive number of bytes", v)
				}
				cfg.PartSize = n
			default:
				return nil, bad("unknown parameter %q (known: endpoint, secure, region, ca, part_size)", key)
			}
		}
		if cfg.CAFile == "" && cfg.Secure {
			cfg.CAFile = os.Getenv("AWS_CA_BUNDLE")
		}
		cfg.AccessKey = os.Getenv("AWS_ACCESS_KEY_ID")
		cfg.SecretKey = os.Getenv("AWS_SECRET_ACCESS_KEY")
		if cfg.AccessKey == "" || cfg.SecretKey == "" {
			return nil, bad("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set")
		}
		for _, o := range opts {
			o(&cfg)
		}
		return NewS3(ctx, cfg)

	case "":
		return nil, bad("no scheme: want file:///path or s3://bucket?endpoint=host:port")
	default:
		return nil, bad("unsupported scheme %q: want file or s3", u.Scheme)
	}
}
