// Package tabletdesc is the vocabulary in which every layer of Tabula
// describes a table's tablets: the row range a tablet serves (KeyRange), the
// schema its table gives it (Schema: column families, their GC policies,
// locality groups), the state it persists (State: SSTable lists, the commit
// log position replay starts from, split records) and the answer of a
// server that does not serve a row (NotServingError).
//
// These are plain values with no I/O: the storage engine (tablet,
// commitlog, tabletserver), the control plane (master, cluster), the
// METADATA codec (meta) and the client all share them, and the package
// depends on nothing of Tabula but storage/cell. It is what lets
// storage/meta and storage/client describe tablets without linking the
// engine (sstable, memtable, the commit log, the object stores); a test in
// storage/client keeps it so. The wire form of the not-serving answer (a
// gRPC status detail) is in storage/tabletserver/tabletpb, next to its
// message, so that this package and the engine stay free of gRPC.
package tabletdesc
