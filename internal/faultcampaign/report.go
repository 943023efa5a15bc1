package faultcampaign

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// KindSummary is the figures of one fault kind over a run.
type KindSummary struct {
	Kind            string
	Count           int
	Errors          int
	WorstUnavail    time.Duration
	WorstWait       time.Duration // the longest Fault.Waited
	WorstStall      time.Duration // the longest Fault.ClientStall
	StalledLibrary  string        // its Fault.ClientStalled
	Skipped         string        // why the kind was not applied
	WorstUnavailSec string
	WorstWaitSec    string
	WorstStallSec   string // with the library: "4.1 s (official)"
}

// Summary is a run's figures.
type Summary struct {
	Ops, OK, Failed, Unknown int
	ByOp                     map[string]int
	Faults                   int
	Kinds                    []KindSummary
	Anomalies                int
	LostWrites               int
	P50, P99, Max            time.Duration
}

// Summarize computes the figures of r.
func (r *Result) Summarize() Summary {
	s := Summary{ByOp: map[string]int{}, Faults: len(r.Faults), Anomalies: len(r.Anomalies)}
	seenScan := map[int]bool{}
	var lat []time.Duration
	for _, e := range r.Events {
		if e.Worker == "final" {
			continue
		}
		name := e.In.Kind.String()
		if e.Scan > 0 {
			if seenScan[e.Scan] {
				continue
			}
			seenScan[e.Scan] = true
			name = "scan"
		}
		s.Ops++
		s.ByOp[name]++
		switch {
		case e.Failed:
			s.Failed++
		case e.Out.Unknown:
			s.Unknown++
		default:
			s.OK++
			lat = append(lat, e.Return-e.Call)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		s.P50, s.P99, s.Max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	for _, f := range r.Finals {
		s.LostWrites += f.Lost()
	}
	for _, k := range AllKinds {
		ks := KindSummary{Kind: k, Skipped: Skipped[k]}
		for _, f := range r.Faults {
			if f.Kind != k {
				continue
			}
			ks.Count++
			if f.Err != "" {
				ks.Errors++
			}
			ks.WorstUnavail = max(ks.WorstUnavail, f.Unavailable)
			ks.WorstWait = max(ks.WorstWait, f.Waited)
			if f.ClientStall > ks.WorstStall {
				ks.WorstStall, ks.StalledLibrary = f.ClientStall, f.ClientStalled
			}
		}
		ks.WorstUnavailSec = fmt.Sprintf("%.1f s", ks.WorstUnavail.Seconds())
		ks.WorstWaitSec = fmt.Sprintf("%.1f s", ks.WorstWait.Seconds())
		ks.WorstStallSec = fmt.Sprintf("%.1f s", ks.WorstStall.Seconds())
		if ks.StalledLibrary != "" {
			ks.WorstStallSec += " (" + ks.StalledLibrary + ")"
		}
		s.Kinds = append(s.Kinds, ks)
	}
	return s
}

// WriteText prints the run's figures: operations, faults, anomalies, lost
// acknowledged writes, and per fault kind the longest unavailability
// (Fault.Unavailable), the longest wait of a caller (Fault.Waited) and the
// longest stall of a client library (Fault.ClientStall).
func (r *Result) WriteText(w io.Writer) {
	s := r.Summarize()
	fmt.Fprintf(w, "campaign: %.0f s, %d operations (%d ok, %d failed, %d unknown outcome)", r.Duration.Seconds(), s.Ops, s.OK, s.Failed, s.Unknown)
	var ops []string
	for k, v := range s.ByOp {
		ops = append(ops, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(ops)
	fmt.Fprintf(w, " [%s]; latency p50 %v p99 %v max %v\n", strings.Join(ops, ", "), s.P50.Round(time.Millisecond), s.P99.Round(time.Millisecond), s.Max.Round(time.Millisecond))
	fmt.Fprintf(w, "faults: %d; anomalies: %d; acknowledged writes lost: %d\n", s.Faults, s.Anomalies, s.LostWrites)
	fmt.Fprintf(w, "%-16s %6s %7s %-23s %-13s %s\n", "kind", "faults", "errors", "longest unavailability", "longest wait", "longest client stall")
	for _, k := range s.Kinds {
		if k.Skipped != "" && k.Count == 0 {
			fmt.Fprintf(w, "%-16s skipped: %s\n", k.Kind, k.Skipped)
			continue
		}
		fmt.Fprintf(w, "%-16s %6d %7d %-23s %-13s %s\n", k.Kind, k.Count, k.Errors, k.WorstUnavailSec, k.WorstWaitSec, k.WorstStallSec)
	}
	for _, f := range r.Finals {
		fmt.Fprintf(w, "row %s: counter %d (acknowledged increments %d, unknown %d), %d appends in the final value\n",
			f.Row, f.State.N, f.AckedIncr, f.UnkIncr, strings.Count(f.State.A, "/"))
	}
	for _, m := range r.SelfStops {
		fmt.Fprintf(w, "supervisor: %s\n", m)
	}
	for _, a := range r.Anomalies {
		fmt.Fprintf(w, "ANOMALY: %s\n", a)
	}
}

// reportPage is the HTML report's data.
type reportPage struct {
	Title     string
	Generated string
	Summary   Summary
	Faults    []faultRow
	Anomalies []string
	SelfStops []string
	Rows      []RowResult
	Finals    []Final
	Width     int
	Height    int
	Bands     []band
	Dots      []dot
	Axis      []tick
	LatAxis   []tick
}

type faultRow struct {
	Fault
	StartSec, HealedSec, UnavailSec, WaitedSec, StallSec string
}

type band struct {
	X, W  float64
	Kind  string
	Label string
	Color string
}

type dot struct {
	X, Y  float64
	Class string
	Title string
}

type tick struct {
	Pos   float64
	Label string
}

var kindColors = map[string]string{
	KillServer: "#e4572e", PauseServer: "#f3a712", PauseMaster: "#a8c686", KillMaster: "#669bbc",
	PauseMinIO: "#8e7dbe", RestartMinIO: "#c5a3ff", RestartConsul: "#29335c", MoveTablet: "#17bebb",
	SplitTablet: "#76b041", MergeTablets: "#888888", MajorCompact: "#aaaaaa", SchemaChange: "#d4a373", CorruptSSTable: "#9b2226",
}

// WriteHTML writes the report page: the figures, a timeline of the faults
// with every operation as a dot at its call time and latency, the
// unavailability per fault and per kind, the anomalies.
func (r *Result) WriteHTML(w io.Writer) error {
	p := reportPage{Title: "Tabula fault campaign", Generated: r.Start.UTC().Format(time.RFC3339), Summary: r.Summarize(),
		Anomalies: r.Anomalies, SelfStops: r.SelfStops, Rows: r.Rows, Finals: r.Finals, Width: 1200, Height: 320}
	total := r.Duration.Seconds()
	if total <= 0 {
		total = 1
	}
	x := func(d time.Duration) float64 { return 60 + d.Seconds()/total*float64(p.Width-80) }
	// Latency on a log scale from 1 ms to 10 s.
	y := func(d time.Duration) float64 {
		ms := math.Max(1, float64(d)/float64(time.Millisecond))
		return float64(p.Height-30) - math.Log10(ms)/4*float64(p.Height-50)
	}
	for _, f := range r.Faults {
		p.Faults = append(p.Faults, faultRow{Fault: f, StartSec: fmt.Sprintf("%.1f", f.Start.Seconds()),
			HealedSec: fmt.Sprintf("%.1f", f.Healed.Seconds()), UnavailSec: fmt.Sprintf("%.1f", f.Unavailable.Seconds()),
			WaitedSec: fmt.Sprintf("%.1f", f.Waited.Seconds()), StallSec: fmt.Sprintf("%.1f", f.ClientStall.Seconds())})
		p.Bands = append(p.Bands, band{X: x(f.Start), W: math.Max(2, x(f.Healed)-x(f.Start)), Kind: f.Kind,
			Label: fmt.Sprintf("%s %s %.1f–%.1f s, unavailable %.1f s, longest wait %.1f s", f.Kind, f.Target, f.Start.Seconds(), f.Healed.Seconds(), f.Unavailable.Seconds(), f.Waited.Seconds()),
			Color: kindColors[f.Kind]})
	}
	step := dotStep(len(r.Events))
	for i := 0; i < len(r.Events); i += step {
		e := r.Events[i]
		class, lat := "ok", e.Return-e.Call
		switch {
		case e.Failed:
			class = "failed"
		case e.Out.Unknown:
			class, lat = "unknown", 10*time.Second
		}
		p.Dots = append(p.Dots, dot{X: x(e.Call), Y: y(lat), Class: class,
			Title: fmt.Sprintf("%.3f s %s %s %s", e.Call.Seconds(), e.Worker, e.Row, RowModel.DescribeOperation(e.In, e.Out))})
	}
	for s := 0.0; s <= total; s += niceStep(total) {
		p.Axis = append(p.Axis, tick{Pos: x(time.Duration(s * float64(time.Second))), Label: fmt.Sprintf("%.0f s", s)})
	}
	for _, ms := range []float64{1, 10, 100, 1000, 10000} {
		p.LatAxis = append(p.LatAxis, tick{Pos: y(time.Duration(ms * float64(time.Millisecond))), Label: fmtMs(ms)})
	}
	return reportTmpl.Execute(w, p)
}

// maxDots bounds the timeline's dots: a long campaign's 50,000
// operations would make a page the browser draws slowly.
const maxDots = 20000

// dotStep is the timeline's sampling of n operations: every step-th one
// is a dot.
func dotStep(n int) int { return max(1, n/maxDots) }

// timelineDots is the number of dots the timeline draws for n operations.
func timelineDots(n int) int {
	step := dotStep(n)
	return (n + step - 1) / step
}

func niceStep(total float64) float64 {
	for _, s := range []float64{5, 10, 30, 60, 120, 300, 600} {
		if total/s <= 12 {
			return s
		}
	}
	return 1200
}

func fmtMs(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.0f s", ms/1000)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"sec": func(d time.Duration) string { return d.Round(time.Millisecond).String() },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left;font-size:.9em}
.ok{fill:#2a9d8f;fill-opacity:.45}.failed{fill:#e76f51;fill-opacity:.7}.unknown{fill:#6a040f}
.verdict-pass{color:#2a9d8f}.verdict-fail{color:#9b2226}
svg text{font-size:11px}
</style></head><body>
<h1>{{.Title}}</h1>
<p id="generated">Run started {{.Generated}}.</p>
{{with .Summary}}
<h2 id="verdict" class="{{if or .Anomalies .LostWrites}}verdict-fail{{else}}verdict-pass{{end}}">{{if or .Anomalies .LostWrites}}FAILED: {{.Anomalies}} anomalies, {{.LostWrites}} acknowledged writes lost{{else}}PASSED: 0 anomalies, 0 acknowledged writes lost{{end}}</h2>
<table id="figures">
<tr><th>operations</th><td id="ops">{{.Ops}}</td></tr>
<tr><th>succeeded</th><td>{{.OK}}</td></tr>
<tr><th>failed (no effect)</th><td>{{.Failed}}</td></tr>
<tr><th>unknown outcome</th><td>{{.Unknown}}</td></tr>
<tr><th>faults</th><td id="faults">{{.Faults}}</td></tr>
<tr><th>anomalies</th><td id="anomalies">{{.Anomalies}}</td></tr>
<tr><th>acknowledged writes lost</th><td id="lost">{{.LostWrites}}</td></tr>
<tr><th>latency p50 / p99 / max</th><td>{{sec .P50}} / {{sec .P99}} / {{sec .Max}}</td></tr>
</table>
{{end}}
<h2>Timeline</h2>
<p>Bands are faults (from injection to heal); dots are operations at their call time and latency (log scale; unknown outcomes at the top, failures in red).</p>
<svg id="timeline" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" xmlns="http://www.w3.org/2000/svg">
{{range .Bands}}<rect class="fault" data-kind="{{.Kind}}" x="{{.X}}" y="0" width="{{.W}}" height="{{$.Height}}" fill="{{.Color}}" fill-opacity="0.25"><title>{{.Label}}</title></rect>
{{end}}{{range .Dots}}<circle class="{{.Class}}" cx="{{.X}}" cy="{{.Y}}" r="1.5"><title>{{.Title}}</title></circle>
{{end}}{{range .Axis}}<text x="{{.Pos}}" y="{{$.Height}}" text-anchor="middle">{{.Label}}</text>
{{end}}{{range .LatAxis}}<text x="2" y="{{.Pos}}">{{.Label}}</text>
{{end}}</svg>
<h2>Unavailability per fault kind</h2>
<table id="kinds"><tr><th>kind</th><th>faults</th><th>errors</th><th>longest unavailability</th><th>longest wait</th><th>longest client stall</th><th>note</th></tr>
{{range .Summary.Kinds}}<tr class="kind" data-kind="{{.Kind}}"><td>{{.Kind}}</td><td>{{.Count}}</td><td>{{.Errors}}</td><td>{{.WorstUnavailSec}}</td><td>{{.WorstWaitSec}}</td><td>{{.WorstStallSec}}</td><td>{{if .Skipped}}skipped: {{.Skipped}}{{end}}</td></tr>
{{end}}</table>
<h2>Faults</h2>
<table id="faultlist"><tr><th>kind</th><th>target</th><th>injected</th><th>healed</th><th>unavailable</th><th>longest wait</th><th>longest client stall</th><th>rows stalled &gt; 2 s</th><th>note</th><th>error</th></tr>
{{range .Faults}}<tr class="faultrow"><td>{{.Kind}}</td><td>{{.Target}}</td><td>{{.StartSec}} s</td><td>{{.HealedSec}} s</td><td>{{.UnavailSec}} s</td><td>{{.WaitedSec}} s</td><td>{{.StallSec}} s{{if .ClientStalled}} ({{.ClientStalled}}){{end}}</td><td>{{.RowsStalled}}</td><td>{{.Note}}</td><td>{{.Err}}</td></tr>
{{end}}</table>
<h2>Anomalies</h2>
<ul id="anomalylist">{{range .Anomalies}}<li class="anomaly">{{.}}</li>{{else}}<li>none</li>{{end}}</ul>
<h2>Processes that stopped by themselves</h2>
<ul id="selfstops">{{range .SelfStops}}<li>{{.}}</li>{{else}}<li>none</li>{{end}}</ul>
<h2>Rows</h2>
<table id="rows"><tr><th>row</th><th>checked operations</th><th>unknown outcome</th><th>unknown writes nothing showed, taken as not applied</th><th>porcupine</th></tr>
{{range .Rows}}<tr><td>{{.Row}}</td><td>{{.Ops}}</td><td>{{.Unknown}}</td><td>{{.TakenAsNotApplied}}</td><td class="check">{{.Result}}</td></tr>
{{end}}</table>
<table id="finals"><tr><th>row</th><th>final counter</th><th>acknowledged increments</th><th>unknown increments</th><th>acknowledged appends lost</th></tr>
{{range .Finals}}<tr><td>{{.Row}}</td><td>{{.State.N}}</td><td>{{.AckedIncr}}</td><td>{{.UnkIncr}}</td><td>{{len .MissingAppends}}</td></tr>
{{end}}</table>
</body></html>
`))
