package guard

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultCacheTTL is how long NewCache keeps a table's grants: a grant or
// revocation takes effect on every server within this time.
const DefaultCacheTTL = time.Second

// LookupFunc reads a table's grants and families from where they are kept
// (the catalog); ErrTableNotFound (wrapped) for a table that does not exist.
type LookupFunc func(ctx context.Context, table string) (TableInfo, error)

// Lookup calls f: a LookupFunc is Tables without a cache.
func (f LookupFunc) Lookup(ctx context.Context, table string) (TableInfo, error) {
	return f(ctx, table)
}

// NewCache returns Tables over fetch that keeps each answer (a missing
// table too) for ttl (DefaultCacheTTL if zero), so that checks cost a map
// lookup, not a catalog read. Errors other than ErrTableNotFound are not
// kept.
func NewCache(fetch LookupFunc, ttl time.Duration) Tables {
	if ttl <= 0 {
		ttl = DefaultCacheTTL
	}
	return &cache{fetch: fetch, ttl: ttl, m: map[string]cached{}}
}

type cached struct {
	info    TableInfo
	err     error
	expires time.Time
}

type cache struct {
	fetch LookupFunc
	ttl   time.Duration
	mu    sync.Mutex
	m     map[string]cached
}

func (c *cache) Lookup(ctx context.Context, table string) (TableInfo, error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[table]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.info, e.err
	}
	info, err := c.fetch(ctx, table)
	if err != nil && !isNotFound(err) {
		return TableInfo{}, err
	}
	c.mu.Lock()
	if len(c.m) > 100_000 { // a bound against callers naming endless missing tables
		clear(c.m)
	}
	c.m[table] = cached{info: info, err: err, expires: now.Add(c.ttl)}
	c.mu.Unlock()
	return info, err
}

// NoTables is Tables for a server that serves no table (a MapReduce
// worker): every table is unknown.
type NoTables struct{}

// Lookup implements Tables.
func (NoTables) Lookup(_ context.Context, table string) (TableInfo, error) {
	return TableInfo{}, fmt.Errorf("%w: %s (this server serves no table)", ErrTableNotFound, table)
}
