package gateway

import (
	"context"

	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/meta"
)

// ClientLocator is the cluster's Locator: the Go client's location cache
// over METADATA, read through src (client.LocateRange), so that a gateway
// routes exactly as the client does.
type ClientLocator struct {
	Cache  *client.LocationCache
	Source client.MetadataSource
}

// Tablets returns the locations covering [start, end) of table, from the
// cache or METADATA.
func (l ClientLocator) Tablets(ctx context.Context, table meta.TableID, start, end []byte) ([]meta.Location, error) {
	return client.LocateRange(ctx, l.Cache, l.Source, table, start, end)
}

// Invalidate drops loc from the cache.
func (l ClientLocator) Invalidate(loc meta.Location) { l.Cache.Invalidate(loc) }
