package meta

// The METADATA table (paper §5.1). Tablet location is a three-level
// hierarchy: a lock-service key (coord's `root`) names the server of the
// root tablet; the root tablet holds the rows of every other METADATA
// tablet; those hold the rows of the user tablets. One row describes one
// tablet; its key encodes (table id, end row), so that the tablet holding a
// row is the first METADATA row at or after MetadataLookupKey(table, row).
//
// Row key encoding (bytes.Compare order = (table, end row) order):
//
//	escape(instance) escape(table) 0x01 escape(end row)   a tablet with an end row
//	escape(instance) escape(table) 0x02                   the table's last tablet (end row "")
//
// where escape writes a component with 0x00 → 0x00 0xFF and terminates it
// with 0x00 0x01, as storage/cell does for internal keys: the escaping is
// prefix-free, so components compare one by one, and the rows of a table
// are contiguous. Tables sort by (Instance, Table); METADATA's own ID has
// the empty instance, which sorts before every user table (user tables
// always have an instance), so the rows describing METADATA tablets come
// first: they are the root tablet's range, [nil, RootTabletEnd()).

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// MetadataTable is the ID of the METADATA table. Its empty instance keeps it
// apart from every user table (ParseTableName never yields an empty
// instance) and sorts its rows first.
var MetadataTable = TableID{Instance: "", Table: "METADATA"}

// MetadataTableName is METADATA's name on the wire (the Bigtable API's
// table_name). Instance "-" is not a valid Cloud Bigtable instance ID, so
// no user table has this name; ParseTableName maps it to MetadataTable.
const MetadataTableName = "projects/-/instances/-/tables/METADATA"

// MetaTabletID is the tablet ID of METADATA's second tablet, the one the
// master creates at bootstrap to hold the user tablets' rows:
// [RootTabletEnd(), end of table). It splits like a user tablet as it
// fills (its children, with fresh IDs, have their rows in the root
// tablet); the root never does.
const MetaTabletID = "METADATA-meta"

// ServerAddr returns the network address of the tablet server named
// server. A server's name (its ID under the lock service's servers/, which
// METADATA's loc:server records) is "<address>/<nonce>": the address for
// clients, the nonce to tell a restarted server from the one that died
// (whose commit log may still need replaying). A name without a nonce is
// returned as it is.
func ServerAddr(server string) string {
	addr, _, _ := strings.Cut(server, "/")
	return addr
}

// RootTabletID is the tablet ID of the root tablet, METADATA's first
// tablet. The root tablet never splits; its location (and state) live in
// the lock service, not in a METADATA row.
const RootTabletID = "METADATA-root"

// The METADATA column families.
const (
	// FamilyLoc holds where the tablet is served: QualServer, QualEpoch.
	FamilyLoc = "loc"
	// FamilyState holds the tablet's persisted tabletdesc.State, one field per
	// qualifier (QualID … QualSplitKey, and QualFilesPrefix+group).
	FamilyState = "state"
	// FamilyLog holds the tablet's event log: qualifier = event kind,
	// cell timestamp = event time, value = JSON {server, epoch, detail}.
	FamilyLog = "log"
)

// Qualifiers of FamilyLoc.
const (
	QualServer = "server" // the serving tablet server's address (UTF-8)
	QualEpoch  = "epoch"  // the assignment epoch, 8 bytes big-endian
)

// Qualifiers of FamilyState. Numbers are 8 bytes big-endian, rows are raw
// bytes, lists and maps are JSON.
const (
	QualID          = "id"          // tablet ID
	QualStart       = "start"       // start row (raw; absent or empty: the table's start)
	QualFilesPrefix = "files:"      // files:<group> → JSON []tabletdesc.FileMeta, newest first
	QualRedo        = "redo"        // redo point: segment, offset (16 bytes)
	QualFlushedSeq  = "flushed_seq" // 8 bytes
	QualLastSeq     = "last_seq"    // 8 bytes
	QualFamilies    = "families"    // JSON []string
	QualDrops       = "drops"       // JSON map[string]uint64
	QualParent      = "parent"      // parent tablet ID
	QualSplitInto   = "split_into"  // JSON []string
	QualSplitKey    = "split_key"   // raw
	QualMergedFrom  = "merged_from" // JSON []string: the tablets a merge made this one of
)

// Event kinds of FamilyLog (others may be added; readers keep unknown kinds).
const (
	EventLoad       = "load"
	EventUnload     = "unload"
	EventSplit      = "split"
	EventMerge      = "merge"
	EventCompaction = "compaction"
)

// ErrMalformedMetadata is matched (errors.Is) by every error of
// ParseMetadataRowKey, ParseMetadataRow and ParseLocation.
var ErrMalformedMetadata = errors.New("malformed METADATA row")

// Row keys are cell.AppendComponent-encoded instance and table, then a tag.
const (
	tagEnd  = 0x01 // a bounded end row follows
	tagLast = 0x02 // the table's last tablet
)

func appendEscaped(dst []byte, s string) []byte { return cell.AppendComponent(dst, []byte(s)) }

// metadataTablePrefix returns escape(instance) escape(table): every row of
// the table's tablets begins with it.
func metadataTablePrefix(table TableID) []byte {
	b := make([]byte, 0, len(table.Instance)+len(table.Table)+5)
	b = appendEscaped(b, table.Instance)
	return appendEscaped(b, table.Table)
}

// MetadataRowKey returns the METADATA row key of the tablet of table whose
// range ends (exclusively) at endRow; an empty endRow means the table's last
// tablet, whose key sorts after that of every other tablet of the table.
// Keys of different tables order by (Instance, Table). A key is at most
// 2·len(endRow) + 2·(len(Instance)+len(Table)) + 7 bytes: METADATA tablets
// need a row-key limit above the users' (or short split points).
func MetadataRowKey(table TableID, endRow []byte) []byte {
	b := metadataTablePrefix(table)
	if len(endRow) == 0 {
		return append(b, tagLast)
	}
	b = append(b, tagEnd)
	return appendEscaped(b, string(endRow))
}

// MetadataLookupKey returns where a METADATA scan for the tablet of table
// holding row starts: the first METADATA row at or after it describes that
// tablet (if the table has one). It is the immediate successor (in
// bytes.Compare order) of the key a tablet ending at row would have:
// tablet ranges exclude their end row, so the tablet whose end row is row
// itself must not be found, and every tablet ending after row must be.
func MetadataLookupKey(table TableID, row []byte) []byte {
	b := metadataTablePrefix(table)
	b = append(b, tagEnd)
	b = appendEscaped(b, string(row))
	return append(b, 0x00)
}

// MetadataTableRange returns the range [start, end) of METADATA row keys
// that describe tablets of table.
func MetadataTableRange(table TableID) (start, end []byte) {
	p := metadataTablePrefix(table)
	return p, append(slices.Clone(p), tagLast+1)
}

// RootTabletEnd returns the end of the root tablet's range [nil,
// RootTabletEnd()): it holds exactly the rows of METADATA tablets, the
// last one included. The second METADATA tablet starts there.
func RootTabletEnd() []byte {
	return append(MetadataRowKey(MetadataTable, nil), 0x00)
}

// RootLocation returns the root tablet's location when served by server at
// epoch.
func RootLocation(server string, epoch uint64) Location {
	return Location{Table: MetadataTable, End: RootTabletEnd(), TabletID: RootTabletID, Server: server, Epoch: epoch}
}

// ParseMetadataRowKey decodes a MetadataRowKey: the table and the end row
// (nil for the table's last tablet). It accepts only canonical encodings
// (MetadataRowKey of the result gives key back) and never panics.
func ParseMetadataRowKey(key []byte) (TableID, []byte, error) {
	inst, i, err := unescapeAt(key, 0)
	if err != nil {
		return TableID{}, nil, err
	}
	tab, i, err := unescapeAt(key, i)
	if err != nil {
		return TableID{}, nil, err
	}
	id := TableID{Instance: string(inst), Table: string(tab)}
	if i >= len(key) {
		return TableID{}, nil, malformedKey(key, "missing end-row tag")
	}
	switch key[i] {
	case tagLast:
		if i+1 != len(key) {
			return TableID{}, nil, malformedKey(key, "bytes after the last-tablet tag")
		}
		return id, nil, nil
	case tagEnd:
		end, j, err := unescapeAt(key, i+1)
		if err != nil {
			return TableID{}, nil, err
		}
		if j != len(key) {
			return TableID{}, nil, malformedKey(key, "bytes after the end row")
		}
		if len(end) == 0 {
			return TableID{}, nil, malformedKey(key, "empty bounded end row")
		}
		return id, end, nil
	default:
		return TableID{}, nil, malformedKey(key, fmt.Sprintf("bad end-row tag 0x%02x", key[i]))
	}
}

func malformedKey(key []byte, why string) error {
	if len(key) > 64 {
		return fmt.Errorf("%w: key %q…: %s", ErrMalformedMetadata, key[:64], why)
	}
	return fmt.Errorf("%w: key %q: %s", ErrMalformedMetadata, key, why)
}

// unescapeAt decodes the escaped component starting at b[i] and returns it
// (a fresh slice, never nil) and the index after its terminator.
func unescapeAt(b []byte, i int) ([]byte, int, error) {
	v, next, ok := cell.ReadComponent(b, i)
	if !ok {
		return nil, 0, malformedKey(b, "malformed or unterminated component")
	}
	return append([]byte{}, v...), next, nil
}

// Location says where one tablet is served. Start and End bound the
// tablet's rows to [Start, End); a nil or empty End is the end of the table.
// Server is the tablet server's address ("" while unassigned).
//
// Epoch is the assignment epoch, drawn from one cluster-wide increasing
// counter by whoever assigns (the master): a later assignment of any tablet
// — a move, or the load of a split child or a merged tablet — carries a
// larger epoch than the assignments it supersedes. Caches rely on it to
// tell newer locations from stale ones.
type Location struct {
	Table      TableID
	Start, End []byte
	TabletID   string
	Server     string
	Epoch      uint64
}

// Range returns the location's row range.
func (l Location) Range() tabletdesc.KeyRange { return tabletdesc.KeyRange{Start: l.Start, End: l.End} }

// Contains reports whether row lies in the location's range.
func (l Location) Contains(row []byte) bool { return l.Range().Contains(row) }

// MetadataKey returns the key of the METADATA row describing the tablet.
func (l Location) MetadataKey() []byte { return MetadataRowKey(l.Table, l.End) }

// IsRoot reports whether l is the root tablet's location, the one found in
// the lock service rather than in a METADATA row.
func (l Location) IsRoot() bool {
	return l.Table == MetadataTable && len(l.Start) == 0 && bytes.Equal(l.End, RootTabletEnd())
}

// Event is one entry of a tablet's event log.
type Event struct {
	Time   int64  // microseconds since the Unix epoch (the cell's timestamp)
	Kind   string // EventLoad, EventSplit, … (the qualifier)
	Server string
	Epoch  uint64
	Detail string
}

type eventValue struct {
	Server string `json:"server,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// MetadataEntry is one decoded METADATA row: a tablet's table, state,
// location and event log.
type MetadataEntry struct {
	Table TableID
	// State is the tablet's persisted state; State.End is the row key's
	// end row.
	State  tabletdesc.State
	Server string
	Epoch  uint64
	// Events, newest first within a kind, kinds in qualifier order.
	Events []Event
}

// Location returns where the entry's tablet is served.
func (e MetadataEntry) Location() Location {
	return Location{Table: e.Table, Start: e.State.Start, End: e.State.End, TabletID: e.State.ID, Server: e.Server, Epoch: e.Epoch}
}

// MetadataFamilies returns the METADATA table's column families: loc and
// state keep one version, log keeps the 32 newest events of each kind.
func MetadataFamilies() map[string]tabletdesc.Family {
	return map[string]tabletdesc.Family{
		FamilyLoc:   {Name: FamilyLoc, GC: tabletdesc.GCPolicy{MaxVersions: 1}},
		FamilyState: {Name: FamilyState, GC: tabletdesc.GCPolicy{MaxVersions: 1}},
		FamilyLog:   {Name: FamilyLog, GC: tabletdesc.GCPolicy{MaxVersions: 32}},
	}
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// LocationMutation returns the mutation recording that the tablet of table
// ending at end is served by server at epoch (server "" with epoch records
// an unassignment). ts is the cells' timestamp (cell.ServerTimestamp lets
// the tablet assign it).
func LocationMutation(table TableID, end []byte, server string, epoch uint64, ts int64) cell.RowMutation {
	return cell.RowMutation{Row: MetadataRowKey(table, end), Mutations: []cell.Mutation{
		cell.Set(FamilyLoc, []byte(QualServer), ts, []byte(server)),
		cell.Set(FamilyLoc, []byte(QualEpoch), ts, u64(epoch)),
	}}
}

// StateMutation returns the mutation replacing the persisted state of
// tablet st of table, whole: it deletes the state family and writes every
// field, in one atomic row mutation (later mutations of a row mutation
// survive its earlier deletes). The row is MetadataRowKey(table, st.End).
func StateMutation(table TableID, st tabletdesc.State, ts int64) (cell.RowMutation, error) {
	ms := []cell.Mutation{cell.DeleteFamily(FamilyState)}
	set := func(q string, v []byte) { ms = append(ms, cell.Set(FamilyState, []byte(q), ts, v)) }
	setJSON := func(q string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("meta: encoding %s of tablet %s: %w", q, st.ID, err)
		}
		set(q, b)
		return nil
	}
	set(QualID, []byte(st.ID))
	if len(st.Start) > 0 {
		set(QualStart, slices.Clone(st.Start))
	}
	for _, g := range sortedKeys(st.Groups) {
		if err := setJSON(QualFilesPrefix+g, st.Groups[g]); err != nil {
			return cell.RowMutation{}, err
		}
	}
	set(QualRedo, binary.BigEndian.AppendUint64(u64(st.RedoPoint.Segment), uint64(st.RedoPoint.Offset)))
	set(QualFlushedSeq, u64(st.FlushedSeq))
	set(QualLastSeq, u64(st.LastSeq))
	if st.Families != nil {
		if err := setJSON(QualFamilies, st.Families); err != nil {
			return cell.RowMutation{}, err
		}
	}
	if st.Drops != nil {
		if err := setJSON(QualDrops, st.Drops); err != nil {
			return cell.RowMutation{}, err
		}
	}
	if st.Parent != "" {
		set(QualParent, []byte(st.Parent))
	}
	if st.SplitInto != nil {
		if err := setJSON(QualSplitInto, st.SplitInto); err != nil {
			return cell.RowMutation{}, err
		}
	}
	if st.SplitKey != nil {
		set(QualSplitKey, slices.Clone(st.SplitKey))
	}
	if st.MergedFrom != nil {
		if err := setJSON(QualMergedFrom, st.MergedFrom); err != nil {
			return cell.RowMutation{}, err
		}
	}
	return cell.RowMutation{Row: MetadataRowKey(table, st.End), Mutations: ms}, nil
}

// EventMutation returns the mutation appending ev to the event log of the
// tablet of table ending at end. Two events of one kind with the same Time
// are one cell version: the later write wins.
func EventMutation(table TableID, end []byte, ev Event) (cell.RowMutation, error) {
	if ev.Kind == "" {
		return cell.RowMutation{}, fmt.Errorf("meta: event without a kind")
	}
	v, err := json.Marshal(eventValue{Server: ev.Server, Epoch: ev.Epoch, Detail: ev.Detail})
	if err != nil {
		return cell.RowMutation{}, err
	}
	return cell.RowMutation{Row: MetadataRowKey(table, end), Mutations: []cell.Mutation{
		cell.Set(FamilyLog, []byte(ev.Kind), ev.Time, v),
	}}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func malformedRow(key []byte, format string, args ...any) error {
	if len(key) > 64 {
		key = key[:64]
	}
	return fmt.Errorf("%w: row %q: %s", ErrMalformedMetadata, key, fmt.Sprintf(format, args...))
}

// ParseMetadataRow decodes a METADATA row as a read returns it (cells
// ordered by column, newest version first; only the newest version of a
// loc or state column counts). Missing columns leave their fields zero, so
// a row read with a column filter decodes too; unknown families and
// qualifiers are ignored (newer writers). Errors match
// ErrMalformedMetadata. It never panics.
func ParseMetadataRow(row cell.Row) (MetadataEntry, error) {
	table, end, err := ParseMetadataRowKey(row.Key)
	if err != nil {
		return MetadataEntry{}, err
	}
	e := MetadataEntry{Table: table}
	e.State.End = end
	var lastFam string
	var lastQual []byte
	for i, c := range row.Cells {
		newest := i == 0 || c.Family != lastFam || !bytes.Equal(c.Qualifier, lastQual)
		lastFam, lastQual = c.Family, c.Qualifier
		q := string(c.Qualifier)
		switch c.Family {
		case FamilyLoc:
			if !newest {
				continue
			}
			switch q {
			case QualServer:
				e.Server = string(c.Value)
			case QualEpoch:
				if e.Epoch, err = parseU64(row.Key, q, c.Value); err != nil {
					return MetadataEntry{}, err
				}
			}
		case FamilyState:
			if !newest {
				continue
			}
			if err := parseStateCell(&e.State, row.Key, q, c.Value); err != nil {
				return MetadataEntry{}, err
			}
		case FamilyLog:
			var v eventValue
			if err := json.Unmarshal(c.Value, &v); err != nil {
				return MetadataEntry{}, malformedRow(row.Key, "log:%s: %v", q, err)
			}
			e.Events = append(e.Events, Event{Time: c.Timestamp, Kind: q, Server: v.Server, Epoch: v.Epoch, Detail: v.Detail})
		}
	}
	return e, nil
}

// ParseLocation decodes the location in a METADATA row (families loc and
// the state columns id and start suffice; a client reads only those).
func ParseLocation(row cell.Row) (Location, error) {
	e, err := ParseMetadataRow(row)
	if err != nil {
		return Location{}, err
	}
	return e.Location(), nil
}

func parseU64(key []byte, q string, v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, malformedRow(key, "%s: %d bytes, want 8", q, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func parseStateCell(st *tabletdesc.State, key []byte, q string, v []byte) error {
	var err error
	unmarshal := func(dst any) error {
		if e := json.Unmarshal(v, dst); e != nil {
			return malformedRow(key, "state:%s: %v", q, e)
		}
		return nil
	}
	switch {
	case q == QualID:
		st.ID = string(v)
	case q == QualStart:
		st.Start = slices.Clone(v)
	case strings.HasPrefix(q, QualFilesPrefix):
		var fs []tabletdesc.FileMeta
		if err := unmarshal(&fs); err != nil {
			return err
		}
		if st.Groups == nil {
			st.Groups = make(map[string][]tabletdesc.FileMeta)
		}
		st.Groups[strings.TrimPrefix(q, QualFilesPrefix)] = fs
	case q == QualRedo:
		if len(v) != 16 {
			return malformedRow(key, "state:%s: %d bytes, want 16", q, len(v))
		}
		st.RedoPoint = tabletdesc.LogPosition{Segment: binary.BigEndian.Uint64(v), Offset: int64(binary.BigEndian.Uint64(v[8:]))}
	case q == QualFlushedSeq:
		st.FlushedSeq, err = parseU64(key, q, v)
	case q == QualLastSeq:
		st.LastSeq, err = parseU64(key, q, v)
	case q == QualFamilies:
		err = unmarshal(&st.Families)
	case q == QualDrops:
		err = unmarshal(&st.Drops)
	case q == QualParent:
		st.Parent = string(v)
	case q == QualSplitInto:
		err = unmarshal(&st.SplitInto)
	case q == QualSplitKey:
		st.SplitKey = slices.Clone(v)
	case q == QualMergedFrom:
		err = unmarshal(&st.MergedFrom)
	}
	return err
}
