// Package faultcampaign is Tabula's fault campaign: a real cluster on
// loopback (its own Consul agent and MinIO server, two masters, three or
// more tablet servers as processes), clients doing single-row operations
// through the official Cloud Bigtable client (entering through every
// server's gateway, storage/gateways) and Tabula's storage/client on a few hot rows spread
// over several tablets, while a nemesis kills, pauses and disturbs the
// cluster. Each row's history is checked for linearizability with
// porcupine against RowModel; the run reports operations, faults,
// anomalies, acknowledged writes lost, and per fault kind the longest
// unavailability (the longest time a hot row had no success), the
// longest wait (the longest a caller, retrying, waited for one) and the
// longest client stall (the longest time every worker of one client
// library went without a success), as text and as an HTML page.
//
// The campaign itself runs in the package's integration test
// (TestCampaign; TABULA_LONG=1 for the long one).
package faultcampaign

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// OpKind is the kind of one client operation.
type OpKind uint8

// The operations of the workload, each on one row.
const (
	OpPut    OpKind = iota // SetCell c and d (same value, one mutation: never half-applied)
	OpDelete               // DeleteFromColumn c and d
	OpCAS                  // CheckAndMutateRow: if v == Expect then v, w = Value
	OpIncr                 // ReadModifyWriteRow increment n by 1
	OpAppend               // ReadModifyWriteRow append Value to a
	OpRead                 // point read of the row
	OpScan                 // a short scan: one OpRead per row it covers
)

var opNames = [...]string{"put", "delete", "cas", "incr", "append", "read", "scan"}

func (k OpKind) String() string { return opNames[k] }

// IsWrite reports whether the operation changes the row.
func (k OpKind) IsWrite() bool { return k <= OpAppend }

// RowState is a row as the workload sees it: "" is an absent cell. C and
// D are always written together, as are V and W: a read that finds them
// different has seen a half-applied row.
type RowState struct {
	C, D string
	V, W string
	N    int64
	A    string
}

func (s RowState) String() string {
	return fmt.Sprintf("c=%q d=%q v=%q w=%q n=%d a=…%s", s.C, s.D, s.V, s.W, s.N, tailStr(s.A, 24))
}

func tailStr(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Input is an operation's request.
type Input struct {
	Kind   OpKind
	Value  string // put, cas (the new value), append (the token)
	Expect string // cas: the value v must hold ("" absent)
}

// Output is an operation's answer. Unknown: the operation failed in a way
// that does not tell whether it was applied (a timeout, a connection lost
// after sending); its return time is infinite in the history, so that it
// may take effect at any point after its call, or never.
type Output struct {
	Unknown bool
	Matched bool     // cas
	N       int64    // incr: the new value
	A       string   // append: the new value
	Read    RowState // read
}

// RowModel is porcupine's model of one row under the workload's
// operations.
var RowModel = porcupine.Model{
	Init: func() any { return RowState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(RowState), input.(Input), output.(Output)
		switch in.Kind {
		case OpPut:
			s.C, s.D = in.Value, in.Value
			return true, s
		case OpDelete:
			s.C, s.D = "", ""
			return true, s
		case OpCAS:
			matched := s.V == in.Expect
			if matched {
				s.V, s.W = in.Value, in.Value
			}
			return out.Unknown || out.Matched == matched, s
		case OpIncr:
			s.N++
			return out.Unknown || out.N == s.N, s
		case OpAppend:
			s.A += in.Value
			return out.Unknown || out.A == s.A, s
		case OpRead:
			return out.Read == s, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		var b strings.Builder
		b.WriteString(in.Kind.String())
		switch in.Kind {
		case OpPut, OpAppend:
			fmt.Fprintf(&b, "(%s)", in.Value)
		case OpCAS:
			fmt.Fprintf(&b, "(%q→%s)", in.Expect, in.Value)
		}
		switch {
		case out.Unknown:
			b.WriteString(" → unknown")
		case in.Kind == OpCAS:
			fmt.Fprintf(&b, " → matched=%v", out.Matched)
		case in.Kind == OpIncr:
			fmt.Fprintf(&b, " → %d", out.N)
		case in.Kind == OpAppend:
			fmt.Fprintf(&b, " → …%s", tailStr(out.A, 24))
		case in.Kind == OpRead:
			fmt.Fprintf(&b, " → %s", out.Read)
		}
		return b.String()
	},
	DescribeState: func(state any) string { return state.(RowState).String() },
}
