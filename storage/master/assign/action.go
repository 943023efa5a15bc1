package assign

import "fmt"

// ActionKind tells actions apart.
type ActionKind int

const (
	// Assign asks Server to load Tablet. RecoverFrom names the server whose
	// commit log holds the tablet's writes after its redo point (a dead or
	// vanished last owner); SortedLog says that log has been sorted.
	Assign ActionKind = iota
	// Unassign asks Server to unload Tablet (compacting its memtable first).
	// Once the unload is confirmed the tablet is unassigned and a later
	// Plan assigns it: to To, the destination this Plan chose, if the
	// master kept To in the request's InFlight record and To is active.
	Unassign
	// SortLog asks for Server's (dead) commit log to be sorted by (tablet,
	// sequence) once, before its many tablets are recovered.
	SortLog
	// Merge asks for Tablet and Right, adjacent tablets of Table, to become
	// one: unload both, commit the merged tablet to METADATA, assign it.
	Merge
	// Rescan asks for METADATA's rows of Table in [Start, End) to be read
	// again (End "" to the table's end): a server serves a tablet the master
	// does not know, most often the child of a split whose notification was
	// lost, or METADATA as read has overlapping tablets. Rows in the range
	// are not assigned until the read settles it. A served tablet that
	// METADATA still lacks after the read is the server's to drop (it
	// serves only what METADATA records); Plan keeps asking meanwhile.
	Rescan
	// Record writes Server, which serves Tablet, as Tablet's location in
	// METADATA (with a fresh epoch). METADATA names another server or none:
	// the load's location write failed, or was dropped because the master
	// that sent the load lost its lock first (a term ends between the two).
	// Clients find tablets through METADATA, so until then the tablet's
	// rows are unreachable although it is served.
	Record
)

// String returns the kind's name: "assign", "unassign", …
func (k ActionKind) String() string {
	switch k {
	case Assign:
		return "assign"
	case Unassign:
		return "unassign"
	case SortLog:
		return "sortlog"
	case Merge:
		return "merge"
	case Rescan:
		return "rescan"
	case Record:
		return "record"
	}
	return fmt.Sprintf("ActionKind(%d)", int(k))
}

// Action is one thing for the master to do. Which fields matter depends on
// Kind (see the ActionKind constants).
type Action struct {
	Kind        ActionKind
	Tablet      TabletID
	Server      ServerID
	RecoverFrom ServerID
	SortedLog   bool
	To          ServerID
	Right       TabletID
	Table       string
	Start, End  string
	// Reason is for logs and the status page: "unassigned", "dead",
	// "move", "timeout", "failed" (a load resent after its call failed),
	// "balance", "swap", "drain", "duplicate", "split", "unknown", "small",
	// "unrecorded", "orphan".
	Reason string
}

// String describes the action in one line, for logs and tests.
func (a Action) String() string {
	switch a.Kind {
	case Assign:
		s := fmt.Sprintf("assign %s to %s (%s)", a.Tablet, a.Server, a.Reason)
		if a.RecoverFrom != "" {
			s += fmt.Sprintf(" recover from %s sorted=%v", a.RecoverFrom, a.SortedLog)
		}
		return s
	case Unassign:
		return fmt.Sprintf("unassign %s from %s to %s (%s)", a.Tablet, a.Server, a.To, a.Reason)
	case SortLog:
		return fmt.Sprintf("sort log of %s", a.Server)
	case Merge:
		return fmt.Sprintf("merge %s/%s+%s", a.Table, a.Tablet, a.Right)
	case Rescan:
		return fmt.Sprintf("rescan %s [%q, %q) (%s)", a.Table, a.Start, a.End, a.Reason)
	case Record:
		return fmt.Sprintf("record %s at %s (%s)", a.Tablet, a.Server, a.Reason)
	}
	return a.Kind.String()
}
