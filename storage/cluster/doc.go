// Package cluster assembles the distributed Tabula of the paper's section 5
// from the pieces below it: the tablet server role (StartTabletServer: a
// tabletserver.Host in partial mode behind a coord session, its commit log
// in the object store, the gateway and the TabletControl service), and the
// master role (StartMaster: the master.Loop, the admin API over a catalog
// kept in the lock service, METADATA access and file garbage collection) —
// and `tabula dev`, the whole of Tabula in one process (StartDev): the
// same two roles, built by the same constructors, one master and one
// tablet server over the in-process lock service kept in a file
// (coord.OpenLocal, DevCoordFile), the directory as the object store
// (blob.Local) and commit logs as local files (ServerConfig.LogDir,
// MasterConfig.LogDir), with both roles' services on one gRPC server and
// one listener (inProcess). StartDev returns once the master has assigned
// every tablet to the server and the server has loaded it. The roles share
// their gRPC server construction (newGRPCServer) and their defaults.
//
// The names a reader should know:
//
//   - A tablet server's name (its key under coord's servers/, and what
//     METADATA's loc:server records) is "<address>/<nonce>"
//     (NewServerName): clients dial meta.ServerAddr(name), and the nonce
//     tells a restarted server from the dead one whose commit log, under
//     LogPrefix(name), may still need replaying.
//   - The root tablet's location is the JSON of a meta.Location in coord's
//     `root` key; the rows of METADATA's other tablets are in the root
//     tablet, the rows of user tablets in those (meta.MetadataRowKey).
//     METADATA's tablets other than the root split like user tablets
//     (past ServerConfig.MetadataSplitBytes, between two rows), their
//     splits committed to the root's rows and finished or repaired by the
//     master as user splits are; the root never splits, so a lookup reads
//     at most three levels.
//   - SSTable lists and redo points live in per-tablet state objects in
//     the object store (tablet.NewBlobStateStore under StatePrefix), written
//     only by the tablet's current server while its lease is valid;
//     METADATA rows hold each tablet's ID, range, location, epoch and event
//     log.
//   - Table schemas live in the lock service (coord.SchemaKey), as the
//     paper keeps them in Chubby (NewCoordCatalog).
package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"strings"
)

// Object-store prefixes of a cluster's data.
const (
	// StatePrefix holds one state object per tablet.
	StatePrefix = "state"
	// LogsPrefix holds one commit log per tablet server (LogPrefix).
	LogsPrefix = "logs/"
	// SortedLogsPrefix holds the sorted copies of dead servers' commit
	// logs (SortedLogPrefix), made once for a recovery that loads many of
	// a dead server's tablets.
	SortedLogsPrefix = "sortedlogs/"
)

// NewServerName returns a fresh name for a tablet server listening on addr.
func NewServerName(addr string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return addr + "/" + hex.EncodeToString(b[:])
}

// LocalLogDir is the directory of server's commit log kept as files under
// root (ServerConfig.LogDir): root/LogPrefix(server), so that root,
// opened as a blob.Local, has the layout of the object store's logs.
func LocalLogDir(root, server string) string {
	return filepath.Join(root, filepath.FromSlash(LogPrefix(server)))
}

// LogPrefix is the object-name prefix of server's commit log.
func LogPrefix(server string) string {
	return LogsPrefix + strings.ReplaceAll(server, "/", "_")
}

// SortedLogPrefix is the object-name prefix of the sorted copy of server's
// commit log.
func SortedLogPrefix(server string) string {
	return SortedLogsPrefix + strings.ReplaceAll(server, "/", "_")
}
