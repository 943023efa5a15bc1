package assign

import "time"

// ServerID names a tablet server for the life of its Consul session (its
// key under servers/). A restarted server comes back under a new ID.
type ServerID string

// TabletID names a tablet. METADATA's IDs are the only ones the planner
// trusts; a server may report IDs METADATA does not (yet) hold.
type TabletID string

// Kind says what a tablet holds, which fixes the order of assignment.
type Kind int

const (
	// User is a tablet of a user table.
	User Kind = iota
	// Meta is a METADATA tablet other than the root.
	Meta
	// Root is the root tablet: METADATA's first tablet, which never splits.
	Root
)

func (k Kind) rank() int {
	switch k {
	case Root:
		return 0
	case Meta:
		return 1
	}
	return 2
}

// Tablet is a tablet as METADATA records it.
type Tablet struct {
	ID    TabletID
	Table string
	// Start and End bound the rows, [Start, End); End "" is the end of the
	// table.
	Start, End string
	// Size is the bytes of its SSTables per METADATA; a server's report
	// (Served.Bytes) overrides it when set.
	Size int64
	// LastServer is METADATA's location: the server that last loaded it,
	// "" if none ever did.
	LastServer ServerID
	Kind       Kind
}

// Served is a tablet a live server reports serving.
type Served struct {
	ID TabletID
	// Table, Start and End are the server's idea of the tablet; they are
	// used only for IDs METADATA lacks (a split the master has not read).
	Table      string
	Start, End string
	// Bytes is the tablet's current size; 0 means unknown (use METADATA's).
	Bytes int64
	// Splitting is set while the server is splitting the tablet.
	Splitting bool
	// SharesFiles: some of its SSTables hold rows outside its range (a
	// split child not yet compacted), so Bytes undercounts it: it is
	// never merged for being small.
	SharesFiles bool
	// LoadedAgo is how long ago the master saw this server's load of the
	// tablet confirmed, set by the master when it remembers; 0 when it
	// does not (loaded long ago, before this master, or created on the
	// server by a split). Config.SettleAfterLoad reads it.
	LoadedAgo time.Duration
}

// Server is a live tablet server: one holding its lock under servers/.
type Server struct {
	ID       ServerID
	Addr     string
	Draining bool
	// Serving lists the tablets the server reports serving; its load (tablet
	// count and bytes) is derived from it.
	Serving []Served
}

// LogState is how far the sorting of a dead server's commit log has got.
type LogState int

const (
	// LogUnsorted: nobody has sorted the log.
	LogUnsorted LogState = iota
	// LogSorting: a SortLog is under way.
	LogSorting
	// LogSorted: the log is sorted by (tablet, sequence); recovering
	// servers read their tablet's run of it.
	LogSorted
	// LogSortFailed: sorting failed; recover from the unsorted log.
	LogSortFailed
)

// DeadServer is a server the master has declared dead: it acquired the
// server's lock, so the server can no longer serve.
type DeadServer struct {
	ID  ServerID
	Log LogState
	// Held is how many tablets the server reported serving when it was
	// declared dead (the master's own record): with METADATA tablets
	// among them, its user tablets' rows may be unreadable until those
	// are served again, yet the log sort they will need can start at once.
	Held int
	// SortingFor is how long the sort of its log has been under way (Log
	// LogSorting).
	SortingFor time.Duration
}

// RequestKind tells in-flight requests apart.
type RequestKind int

const (
	// LoadRequest: the master asked Server to load Tablet.
	LoadRequest RequestKind = iota
	// UnloadRequest: the master asked Server to unload Tablet.
	UnloadRequest
)

// InFlight is a request the master sent and has not seen confirmed (the
// server's report does not yet reflect it) nor failed.
type InFlight struct {
	Kind   RequestKind
	Tablet TabletID
	Server ServerID
	// Age is the time since the request was sent.
	Age time.Duration
	// To is, for an unload, the destination the Unassign named. Keep the
	// record after the unload is confirmed, until the tablet's next Assign
	// replaces it: Plan then sends the tablet to To if To is still active,
	// which is what makes a planned move (or swap) land where planned.
	To ServerID
	// Retry, when set and shorter than Config.LoadTimeout, is how old a
	// load or unload may get before it is sent again instead: the master
	// sets it, backing off, for one whose call failed (the target answered
	// with an error or could not be reached). A resend goes to the same
	// server, which is safe whatever the failed call did: loads and
	// unloads are idempotent, and one still under way is waited for.
	Retry time.Duration
}

// Split is a split a server reports having committed to METADATA.
type Split struct {
	Server   ServerID
	Table    string
	Parent   TabletID
	Children []TabletID
}

// MergeUnderway is a merge in progress: Left and Right become one tablet.
// Neither is assigned, moved or merged again until METADATA shows the
// result.
type MergeUnderway struct {
	Table       string
	Left, Right TabletID
}

// State is everything the master has observed. Slices may come in any
// order; Plan sorts what it needs.
type State struct {
	// Live servers; one whose ID is also in Dead is ignored.
	Live []Server
	// Dead servers whose tablets may still need recovering. The master
	// drops one once none of METADATA's tablets names it as LastServer
	// without being served elsewhere.
	Dead []DeadServer
	// Tablets is every tablet METADATA holds as the master last read it,
	// root included. (Without a Root tablet, as in tests of user tables
	// alone, nothing waits for it.)
	Tablets []Tablet
	// InFlight holds at most one request per tablet (see the package doc).
	InFlight []InFlight
	// Splits reported by servers and not yet seen in Tablets.
	Splits []Split
	// Merges under way.
	Merges []MergeUnderway
	// MergeRequests are merges asked for (by an operator, through the
	// admin API), not yet under way: Plan emits a Merge for each whose two
	// tablets are adjacent, served and settled, whatever their sizes and
	// Config.NoMerge, within Config.MaxMerges.
	MergeRequests []MergeUnderway
	// Orphans are tablets live servers report that METADATA, read whole,
	// has lacked for long (the master's grace, far beyond a split's
	// report or its repair): tablets of a deleted table, left where the
	// deletion's unloads did not reach. Plan unloads each from its
	// server.
	Orphans []Orphan
}

// Orphan is a tablet a server serves that belongs to no table METADATA
// knows (State.Orphans).
type Orphan struct {
	Server ServerID
	Tablet TabletID
}

// Config tunes Plan. The zero value means defaults.
type Config struct {
	// Tolerance is the band around the mean tablet count and bytes inside
	// which a server counts as balanced (0.2 = ±20%). Default 0.2, inside
	// the ±30% the cluster promises.
	Tolerance float64
	// MinByteSkew is how far from the mean a server's bytes may be before
	// they count as unbalanced, when Tolerance of the mean is less: a
	// fresh table's few megabytes are not worth moving tablets for.
	// Default SplitSize/4.
	MinByteSkew int64
	// MaxMoves bounds the balance and drain moves under way at once
	// (unloads in flight plus those planned this round). Default 8.
	MaxMoves int
	// LoadTimeout is how long a load or unload may stay unconfirmed before
	// it is sent again. Default 30s.
	LoadTimeout time.Duration
	// SortLogMin is how many tablets of one dead server must be recovered
	// for its log to be sorted first. Default 8.
	SortLogMin int
	// MetaSortWait is how long the METADATA tablets of a dead server whose
	// log is being sorted wait for the sort when at least two of them need
	// recovering: each would otherwise replay the whole unsorted log (a
	// campaign's dead server had 2,126 log objects: four METADATA tablets
	// read them all, on three servers at once, beside the sort, and came
	// back 7 s after the root). A sort that takes longer than this is not
	// waited for. Default 10s.
	MetaSortWait time.Duration
	// SplitSize is the size past which servers split tablets; merged
	// tablets stay below it. Default 256 MiB.
	SplitSize int64
	// MergeBelow: two adjacent tablets both smaller than this merge.
	// Default SplitSize/4.
	MergeBelow int64
	// MaxMerges bounds the merges under way at once. Default 2.
	MaxMerges int
	// NoMerge turns merging off.
	NoMerge bool
	// NoBalance holds balance moves back for this Plan: the master was
	// elected moments ago (master.LoopOptions.BalanceAfter).
	NoBalance bool
	// SettleAfterLoad is how long balance leaves a tablet on the server
	// whose load of it was confirmed (Served.LoadedAgo) before it may
	// move it again; draining moves it all the same. Every move makes the
	// tablet's clients look it up again: a tablet just recovered or moved
	// that moves at once makes them do so twice (a fault campaign saw a
	// recovered tablet moved 30 ms after its load, and its callers wait
	// 1.2 s more). Older tablets move instead. Default 10s; negative: off.
	SettleAfterLoad time.Duration
}

func (c Config) withDefaults() Config {
	if c.Tolerance <= 0 {
		c.Tolerance = 0.2
	}
	if c.MaxMoves <= 0 {
		c.MaxMoves = 8
	}
	if c.LoadTimeout <= 0 {
		c.LoadTimeout = 30 * time.Second
	}
	if c.SortLogMin <= 0 {
		c.SortLogMin = 8
	}
	if c.MetaSortWait <= 0 {
		c.MetaSortWait = 10 * time.Second
	}
	if c.SplitSize <= 0 {
		c.SplitSize = 256 << 20
	}
	if c.MergeBelow <= 0 {
		c.MergeBelow = c.SplitSize / 4
	}
	if c.MinByteSkew <= 0 {
		c.MinByteSkew = c.SplitSize / 4
	}
	if c.MaxMerges <= 0 {
		c.MaxMerges = 2
	}
	if c.SettleAfterLoad == 0 {
		c.SettleAfterLoad = 10 * time.Second
	}
	return c
}
