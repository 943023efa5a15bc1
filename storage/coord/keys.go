package coord

import (
	"net/url"
	"strings"
)

// Key names under a cluster's prefix (docs/architecture.md lists them,
// with their writers and readers).
const (
	// KeyMaster is the lock held by the active master.
	KeyMaster = "master"
	// KeyRoot holds where the root tablet is served.
	KeyRoot = "root"
	// PrefixServers holds one lock per live tablet server (ServerKey).
	PrefixServers = "servers/"
	// PrefixSchema holds one key per table's schema (SchemaKey).
	PrefixSchema = "schema/"
	// PrefixACL holds one key per table's access list (ACLKey).
	PrefixACL = "acl/"
)

// DefaultCluster is the cluster name used when none is given.
const DefaultCluster = "default"

// ClusterPrefix is the prefix under which cluster name keeps its keys:
// "tabula/<cluster>/". An empty name means DefaultCluster.
func ClusterPrefix(cluster string) string {
	if cluster == "" {
		cluster = DefaultCluster
	}
	return "tabula/" + escape(cluster) + "/"
}

// ServerKey is the lock key of tablet server id.
func ServerKey(id string) string { return PrefixServers + escape(id) }

// ServerID is the inverse of ServerKey; ok is false for a key that is not a
// server key.
func ServerID(key string) (id string, ok bool) {
	rest, ok := strings.CutPrefix(key, PrefixServers)
	if !ok || rest == "" {
		return "", false
	}
	id, err := url.PathUnescape(rest)
	if err != nil {
		return "", false
	}
	return id, true
}

// ServerRecord is the value of a tablet server's key: where it serves
// and, when it is a new incarnation at the address of an earlier one that
// it proved exited, that one's name.
type ServerRecord struct {
	Addr string
	// Succeeds is the name (the ServerID) of the tablet server that held
	// this address on this host before, when the new one proved that its
	// process exited — by taking the lock that process held for as long
	// as it served (cluster's successionLock). A master may then declare
	// that server dead at once: no lease of its can still be in use.
	Succeeds string
}

// successorMark separates a ServerRecord's address from its Succeeds.
const successorMark = "\nsucceeds "

// Encode is the key's value: the address alone when Succeeds is empty (as
// servers wrote before ServerRecord had it).
func (r ServerRecord) Encode() []byte {
	if r.Succeeds == "" {
		return []byte(r.Addr)
	}
	return []byte(r.Addr + successorMark + r.Succeeds)
}

// ParseServerRecord reads a server key's value (Encode's form; a plain
// address is a record without Succeeds).
func ParseServerRecord(v []byte) ServerRecord {
	addr, succeeds, _ := strings.Cut(string(v), successorMark)
	return ServerRecord{Addr: addr, Succeeds: succeeds}
}

// SchemaKey is the key of table's schema.
func SchemaKey(table string) string { return PrefixSchema + escape(table) }

// ACLKey is the key of table's access list.
func ACLKey(table string) string { return PrefixACL + escape(table) }

// escape makes a name one path segment: table names contain slashes
// (projects/P/instances/I/tables/T), and a slash would make a name look
// like a prefix of another.
func escape(name string) string { return url.PathEscape(name) }
