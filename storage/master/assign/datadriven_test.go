package assign

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestPlanDataDriven runs the files under testdata/plan: each `plan` block
// describes a State in its input and expects Plan's actions, one per line
// (Action.String), in its output. `go test -run TestPlanDataDriven -rewrite`
// rewrites the expectations after a deliberate change of policy.
//
// The input's lines (words are key=value unless said otherwise):
//
//	tablet ID [table=T] [start=K] [end=K] [size=N] [last=SERVER] [kind=root|meta|user]
//	server ID [draining] [serving=ID[:BYTES][@AGO][!],…]   (! marks a tablet being split, ~ one sharing files,
//	                                                       @AGO a load the master confirmed AGO ago: Served.LoadedAgo)
//	dead ID [log=unsorted|sorting|sorted|failed]
//	inflight load|unload TABLET SERVER [to=SERVER] [age=DURATION]
//	split SERVER PARENT CHILD,…
//	merging LEFT RIGHT [table=T]
//	mergerequest LEFT RIGHT [table=T]   (a merge asked for through the admin API)
//
// The command's arguments set Config: tolerance=F maxmoves=N
// loadtimeout=DURATION sortlogmin=N splitsize=N mergebelow=N maxmerges=N
// minbyteskew=N settleafterload=DURATION nomerge nobalance.
func TestPlanDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/plan", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "plan" {
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			cfg, err := parseConfig(d.CmdArgs)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			st, err := parseState(d.Input)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			var b strings.Builder
			for _, a := range Plan(st, cfg) {
				b.WriteString(a.String() + "\n")
			}
			if b.Len() == 0 {
				return "nothing\n"
			}
			return b.String()
		})
	})
}

func parseConfig(args []datadriven.CmdArg) (Config, error) {
	var c Config
	for _, a := range args {
		v := ""
		if len(a.Vals) > 0 {
			v = a.Vals[0]
		}
		var err error
		switch a.Key {
		case "tolerance":
			c.Tolerance, err = strconv.ParseFloat(v, 64)
		case "maxmoves":
			c.MaxMoves, err = strconv.Atoi(v)
		case "loadtimeout":
			c.LoadTimeout, err = time.ParseDuration(v)
		case "sortlogmin":
			c.SortLogMin, err = strconv.Atoi(v)
		case "splitsize":
			c.SplitSize, err = strconv.ParseInt(v, 10, 64)
		case "mergebelow":
			c.MergeBelow, err = strconv.ParseInt(v, 10, 64)
		case "maxmerges":
			c.MaxMerges, err = strconv.Atoi(v)
		case "minbyteskew":
			c.MinByteSkew, err = strconv.ParseInt(v, 10, 64)
		case "settleafterload":
			c.SettleAfterLoad, err = time.ParseDuration(v)
		case "nomerge":
			c.NoMerge = true
		case "nobalance":
			c.NoBalance = true
		default:
			return c, fmt.Errorf("unknown config %q", a.Key)
		}
		if err != nil {
			return c, fmt.Errorf("%s: %w", a.Key, err)
		}
	}
	return c, nil
}

// parseState reads a State from the lines of a test's input.
func parseState(input string) (State, error) {
	var st State
	tablets := make(map[TabletID]Tablet)
	type pendingServer struct {
		srv     Server
		serving []string
	}
	var servers []pendingServer
	for n, line := range strings.Split(input, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("line %d %q: %s", n+1, line, fmt.Sprintf(format, args...))
		}
		kv := make(map[string]string)
		var words []string
		for _, w := range f[1:] {
			if k, v, ok := strings.Cut(w, "="); ok {
				kv[k] = v
			} else {
				words = append(words, w)
			}
		}
		switch f[0] {
		case "tablet":
			if len(words) != 1 {
				return st, bad("want: tablet ID key=value…")
			}
			tb := Tablet{ID: TabletID(words[0]), Table: kv["table"], Start: kv["start"], End: kv["end"], LastServer: ServerID(kv["last"])}
			if tb.Table == "" {
				tb.Table = "t"
			}
			if s, ok := kv["size"]; ok {
				size, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return st, bad("size: %v", err)
				}
				tb.Size = size
			}
			switch kv["kind"] {
			case "", "user":
			case "root":
				tb.Kind = Root
			case "meta":
				tb.Kind = Meta
			default:
				return st, bad("kind %q", kv["kind"])
			}
			st.Tablets = append(st.Tablets, tb)
			tablets[tb.ID] = tb
		case "server":
			if len(words) < 1 {
				return st, bad("want: server ID [draining] [serving=…]")
			}
			ps := pendingServer{srv: Server{ID: ServerID(words[0]), Addr: words[0] + ":1"}}
			for _, w := range words[1:] {
				if w != "draining" {
					return st, bad("unknown word %q", w)
				}
				ps.srv.Draining = true
			}
			if s := kv["serving"]; s != "" {
				ps.serving = strings.Split(s, ",")
			}
			servers = append(servers, ps)
		case "dead":
			if len(words) != 1 {
				return st, bad("want: dead ID [log=…]")
			}
			d := DeadServer{ID: ServerID(words[0])}
			switch kv["log"] {
			case "", "unsorted":
			case "sorting":
				d.Log = LogSorting
			case "sorted":
				d.Log = LogSorted
			case "failed":
				d.Log = LogSortFailed
			default:
				return st, bad("log %q", kv["log"])
			}
			st.Dead = append(st.Dead, d)
		case "inflight":
			if len(words) != 3 {
				return st, bad("want: inflight load|unload TABLET SERVER")
			}
			in := InFlight{Tablet: TabletID(words[1]), Server: ServerID(words[2]), To: ServerID(kv["to"])}
			switch words[0] {
			case "load":
				in.Kind = LoadRequest
			case "unload":
				in.Kind = UnloadRequest
			default:
				return st, bad("request kind %q", words[0])
			}
			if a := kv["age"]; a != "" {
				age, err := time.ParseDuration(a)
				if err != nil {
					return st, bad("age: %v", err)
				}
				in.Age = age
			}
			st.InFlight = append(st.InFlight, in)
		case "split":
			if len(words) != 3 {
				return st, bad("want: split SERVER PARENT CHILD,…")
			}
			sp := Split{Server: ServerID(words[0]), Parent: TabletID(words[1]), Table: kv["table"]}
			if sp.Table == "" {
				sp.Table = "t"
			}
			for _, c := range strings.Split(words[2], ",") {
				sp.Children = append(sp.Children, TabletID(c))
			}
			st.Splits = append(st.Splits, sp)
		case "merging":
			if len(words) != 2 {
				return st, bad("want: merging LEFT RIGHT")
			}
			m := MergeUnderway{Table: kv["table"], Left: TabletID(words[0]), Right: TabletID(words[1])}
			if m.Table == "" {
				m.Table = "t"
			}
			st.Merges = append(st.Merges, m)
		case "mergerequest":
			if len(words) != 2 {
				return st, bad("want: mergerequest LEFT RIGHT")
			}
			m := MergeUnderway{Table: kv["table"], Left: TabletID(words[0]), Right: TabletID(words[1])}
			if m.Table == "" {
				m.Table = "t"
			}
			st.MergeRequests = append(st.MergeRequests, m)
		default:
			return st, bad("unknown line kind %q", f[0])
		}
	}
	// Served entries take their table and range from the tablet lines, so
	// that the tablets may be listed after the servers.
	for _, ps := range servers {
		for _, s := range ps.serving {
			sv := Served{}
			if strings.HasSuffix(s, "!") {
				sv.Splitting = true
				s = strings.TrimSuffix(s, "!")
			}
			if strings.HasSuffix(s, "~") {
				sv.SharesFiles = true
				s = strings.TrimSuffix(s, "~")
			}
			if rest, ago, ok := strings.Cut(s, "@"); ok {
				d, err := time.ParseDuration(ago)
				if err != nil {
					return st, fmt.Errorf("server %s: serving %q: %v", ps.srv.ID, s, err)
				}
				sv.LoadedAgo, s = d, rest
			}
			id, bytes, hasBytes := strings.Cut(s, ":")
			sv.ID = TabletID(id)
			if hasBytes {
				b, err := strconv.ParseInt(bytes, 10, 64)
				if err != nil {
					return st, fmt.Errorf("server %s: serving %q: %v", ps.srv.ID, s, err)
				}
				sv.Bytes = b
			}
			if tb, ok := tablets[sv.ID]; ok {
				sv.Table, sv.Start, sv.End = tb.Table, tb.Start, tb.End
			}
			ps.srv.Serving = append(ps.srv.Serving, sv)
		}
		st.Live = append(st.Live, ps.srv)
	}
	return st, nil
}
