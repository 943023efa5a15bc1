package tabletserver

import (
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	lru "github.com/hashicorp/golang-lru/v2"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/filter"
)

// filterCacheSize bounds the compiled filters kept. Clients send the same
// few filters over and over (a reader's column filter with every ReadRow),
// and compiling one — its regular expressions above all — cost more than
// the read it guards.
const filterCacheSize = 1024

// filterCache maps a filter's deterministic encoding (and the field path
// its errors are reported under) to the compiled filter. Compiled filters
// are immutable and safe for concurrent use; failed compilations are not
// cached.
type filterCache struct {
	c *lru.Cache[string, *filter.Filter]
}

func newFilterCache() *filterCache {
	c, err := lru.New[string, *filter.Filter](filterCacheSize)
	if err != nil {
		panic(err) // only a non-positive size fails
	}
	return &filterCache{c: c}
}

// compile returns the compiled form of f, from the cache when it is there.
func (fc *filterCache) compile(f *bigtablepb.RowFilter, field string, compile func() (*filter.Filter, error)) (*filter.Filter, error) {
	if f == nil {
		return compile()
	}
	var key string
	if enc, ok := sharedEncoding(f); ok {
		// A filter decoded from bytes many requests send: keyed by
		// those bytes, without encoding it again (which cost a
		// session's point read 7% of the server's CPU).
		key = field + "\x00s" + enc
	} else {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(f)
		if err != nil {
			return compile()
		}
		key = field + "\x00d" + string(b)
	}
	if cf, ok := fc.c.Get(key); ok {
		return cf, nil
	}
	cf, err := compile()
	if err != nil {
		return nil, err
	}
	fc.c.Add(key, cf)
	return cf, nil
}
