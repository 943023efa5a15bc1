// Package assign is the decision core of Tabula's cluster master: which
// tablet goes to which tablet server, what moves for balance, which small
// neighbours merge and which object-store files may be deleted.
//
// Everything here is a pure function of an observation. Plan takes a State
// (what the master has seen: live and dead servers and what each serves,
// METADATA's tablets, requests in flight, reported splits, merges under way)
// and returns the Actions the master should carry out now; PlanSweep takes the
// files tablets reference and the files the store lists and returns the ones
// safe to delete. Neither does I/O, reads the clock or iterates a map in an
// order that shows in the result, so the same input always yields the same
// output and every path is testable without Consul or gRPC — the style of
// etcd's raft, a state machine driven from outside.
//
// The master loop owns the I/O. Each round it gathers a State, calls Plan,
// carries the actions out, and calls Plan again when something changes or
// a tick passes. It keeps one InFlight record per tablet: each Assign and
// Unassign it sends replaces the tablet's record (cancelling the older
// request); a load's record goes when the server reports the tablet or the
// load fails; an unload's record (with its To) stays until the tablet's
// next Assign, so that moves land where planned. Plan is idempotent:
// calling it again on the same State returns the same actions, and a
// tablet with a request in flight gets no new one until the request times
// out.
//
// The rules, in the order Plan applies them:
//
//   - Safety first: a tablet is never assigned while any live server serves
//     it, while an assignment to a live server is in flight, or while a
//     tablet served elsewhere overlaps its row range (a split or merge the
//     master has not read yet: METADATA wins, so the range is rescanned). A
//     tablet that two servers report serving is unassigned from all but one.
//   - Order of the paper's §5.2: the root tablet, then METADATA tablets once
//     the root is served, then user tablets once every METADATA tablet is.
//   - Tablets of dead servers are reassigned with a hint to recover from the
//     dead server's log; when Config.SortLogMin or more come from one server
//     (unplaced in METADATA, or held when it died, DeadServer.Held, if more:
//     the rows of its user tablets are unreadable while its METADATA
//     tablets are down) its log is sorted once first (SortLog) and its user
//     tablets wait for the sort (the root and METADATA tablets do not, and
//     load meanwhile).
//   - Draining servers give all their tablets away; servers that joined get
//     tablets; every server is brought within Config.Tolerance of the mean
//     tablet count and bytes (bytes within Config.MinByteSkew of the mean
//     count as balanced too) by greedy moves (each the one that lowers the
//     sum of squared deviations most; a swap of two tablets when no single
//     move helps), at most Config.MaxMoves under way at once, moving
//     splitting tablets last. A state where every server is in the band
//     yields no moves.
//   - Small adjacent tablets of one table are merged.
package assign
