package main

// The cbt-style argument syntax of the data and admin verbs
// (`key=value` words, `fam:col@ts=value` cells, GC policy expressions),
// parsed by plain functions so every rule is tested without a server.

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"cloud.google.com/go/bigtable"
)

// parseKeyValues splits cbt-style `key=value` words and rejects keys
// outside allowed and repeated keys, so a typo ("prefx=") is an error and
// not a silently unfiltered read.
func parseKeyValues(args []string, allowed ...string) (map[string]string, error) {
	out := make(map[string]string, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("bad argument %q: want key=value with key one of %s", a, strings.Join(allowed, ", "))
		}
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("unknown argument %q: want one of %s", k, strings.Join(allowed, ", "))
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("argument %q given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// parsePositiveInt parses a count such as versions= or count=.
func parsePositiveInt(key, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive integer", key, s)
	}
	return n, nil
}

// splitList splits a comma-separated list, dropping empty items so that
// "a,,b," means a and b.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseSplits parses createtable's splits= list. A key listed twice is an
// error naming it: the server would quietly make one split of the two,
// and a repeated key is more likely a typo than meant.
func parseSplits(s string) ([]string, error) {
	keys := splitList(s)
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			return nil, fmt.Errorf("splits=: key %q listed twice", k)
		}
		seen[k] = true
	}
	return keys, nil
}

// familySpec is one family of a createtable families= list.
type familySpec struct {
	Name   string
	Policy bigtable.GCPolicy // NoGcPolicy when none was given
	// Type is the family's value type: an aggregate over Int64 when
	// agg= was given, nil otherwise.
	Type bigtable.Type
}

// aggregators are the agg= values of a family spec.
var aggregators = map[string]bigtable.Aggregator{
	"sum": bigtable.SumAggregator{},
	"min": bigtable.MinAggregator{},
	"max": bigtable.MaxAggregator{},
	"hll": bigtable.HllppUniqueCountAggregator{},
}

// parseFamilies parses cbt's `families=f1:maxversions=3,f2` syntax: a
// comma-separated list of family names, each optionally followed by ':'
// and a GC policy expression. Tabula adds aggregate families: agg=KIND
// right after the name (f:agg=sum, f:agg=hll:maxversions=1), KIND one of
// sum, min, max (over Int64 input) or hll (a HyperLogLog++ distinct count).
func parseFamilies(s string) ([]familySpec, error) {
	var out []familySpec
	seen := map[string]bool{}
	for _, item := range splitList(s) {
		spec, err := parseFamily(item)
		if err != nil {
			return nil, err
		}
		if seen[spec.Name] {
			return nil, fmt.Errorf("family %q listed twice", spec.Name)
		}
		seen[spec.Name] = true
		out = append(out, spec)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("families=%q names no family", s)
	}
	return out, nil
}

// parseFamily parses one family of parseFamilies' list, or createfamily's
// FAMILY[:agg=KIND][:GCPOLICY] argument: a name, then optionally agg=KIND
// and a GC policy expression, each after a colon.
func parseFamily(item string) (familySpec, error) {
	name, policy, hasPolicy := strings.Cut(item, ":")
	if err := validFamily(name); err != nil {
		return familySpec{}, err
	}
	spec := familySpec{Name: name, Policy: bigtable.NoGcPolicy()}
	if kind, ok := strings.CutPrefix(policy, "agg="); hasPolicy && ok {
		kind, policy, hasPolicy = strings.Cut(kind, ":")
		agg, ok := aggregators[kind]
		if !ok {
			return familySpec{}, fmt.Errorf("family %q: agg=%q: want sum, min, max or hll", name, kind)
		}
		spec.Type = bigtable.AggregateType{Input: bigtable.Int64Type{Encoding: bigtable.BigEndianBytesEncoding{}}, Aggregator: agg}
	}
	if hasPolicy {
		p, err := parseGCPolicy(policy)
		if err != nil {
			return familySpec{}, fmt.Errorf("family %q: %w", name, err)
		}
		spec.Policy = p
	}
	return spec, nil
}

// typeName renders a family's value type for ls: "sum(int64)" for an
// aggregate, the type's name for a declared one, "" for none.
func typeName(vt bigtable.Type) string {
	switch t := vt.(type) {
	case bigtable.AggregateType:
		agg := "aggregate"
		switch t.Aggregator.(type) {
		case bigtable.SumAggregator:
			agg = "sum"
		case bigtable.MinAggregator:
			agg = "min"
		case bigtable.MaxAggregator:
			agg = "max"
		case bigtable.HllppUniqueCountAggregator:
			agg = "hll"
		}
		return agg + "(" + typeName(t.Input) + ")"
	case bigtable.Int64Type:
		return "int64"
	case bigtable.StringType:
		return "string"
	case bigtable.BytesType:
		return "bytes"
	}
	return ""
}

var familyNameRE = regexp.MustCompile(`^[_a-zA-Z0-9][-_.a-zA-Z0-9]*$`)

// validFamily checks a family name against the Cloud Bigtable rule, so a
// bad name is a clear usage error before any request is sent.
func validFamily(name string) error {
	if !familyNameRE.MatchString(name) {
		return fmt.Errorf("bad family name %q: a family name is letters, digits, '_', '-' and '.', and does not start with '-' or '.' ([_a-zA-Z0-9][-_.a-zA-Z0-9]*)", name)
	}
	return nil
}

// columnSpec is one entry of a columns= list: a family and an optional
// qualifier, both RE2 patterns matched against the whole name, as in cbt.
type columnSpec struct {
	Family    string
	Qualifier string // "" means every column of the family
}

// parseColumns parses `columns=f1:c1,f2` into column specs.
func parseColumns(s string) ([]columnSpec, error) {
	var out []columnSpec
	for _, item := range splitList(s) {
		fam, qual, _ := strings.Cut(item, ":")
		if fam == "" {
			return nil, fmt.Errorf("column %q: want family[:qualifier]", item)
		}
		for _, p := range []string{fam, qual} {
			if _, err := regexp.Compile(p); err != nil {
				return nil, fmt.Errorf("column %q: bad pattern: %v", item, err)
			}
		}
		out = append(out, columnSpec{Family: fam, Qualifier: qual})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("columns=%q names no column", s)
	}
	return out, nil
}

// columnsFilter turns column specs into one filter: the union of
// family(+qualifier) matches.
func columnsFilter(cols []columnSpec) bigtable.Filter {
	var fs []bigtable.Filter
	for _, c := range cols {
		f := bigtable.FamilyFilter(c.Family)
		if c.Qualifier != "" {
			f = bigtable.ChainFilters(f, bigtable.ColumnFilter(c.Qualifier))
		}
		fs = append(fs, f)
	}
	if len(fs) == 1 {
		return fs[0]
	}
	return bigtable.InterleaveFilters(fs...)
}

// readFilter combines the optional columns=, regex= (read only) and
// versions= of read and lookup into one filter, or nil when none was given.
func readFilter(kv map[string]string) (bigtable.Filter, error) {
	var fs []bigtable.Filter
	if s, ok := kv["columns"]; ok {
		cols, err := parseColumns(s)
		if err != nil {
			return nil, err
		}
		fs = append(fs, columnsFilter(cols))
	}
	if s, ok := kv["regex"]; ok {
		// Checked here for a usage error; the server matches it (RE2
		// against the whole key, as Cloud Bigtable does).
		if _, err := regexp.Compile(s); err != nil {
			return nil, fmt.Errorf("regex=%q: %v", s, err)
		}
		fs = append(fs, bigtable.RowKeyFilter(s))
	}
	if s, ok := kv["versions"]; ok {
		n, err := parsePositiveInt("versions", s)
		if err != nil {
			return nil, err
		}
		fs = append(fs, bigtable.LatestNFilter(n))
	}
	switch len(fs) {
	case 0:
		return nil, nil
	case 1:
		return fs[0], nil
	}
	return bigtable.ChainFilters(fs...), nil
}

// readRange turns prefix=, start= and end= into a row range. prefix
// excludes the other two: together they would be ambiguous.
func readRange(kv map[string]string) (bigtable.RowRange, error) {
	prefix, hasPrefix := kv["prefix"]
	start, end := kv["start"], kv["end"]
	if hasPrefix {
		if start != "" || end != "" {
			return bigtable.RowRange{}, fmt.Errorf("prefix= cannot be combined with start= or end=")
		}
		return bigtable.PrefixRange(prefix), nil
	}
	if start != "" && end != "" && start >= end {
		return bigtable.RowRange{}, fmt.Errorf("start=%q is not before end=%q", start, end)
	}
	return bigtable.NewRange(start, end), nil
}

// cellSet is one `fam:col[@ts]=value` argument of set.
type cellSet struct {
	Family    string
	Qualifier string
	Timestamp bigtable.Timestamp // bigtable.ServerTime when not given
	Value     string
}

// parseCellSet parses `fam:col=value` or `fam:col@ts=value`, ts in
// microseconds since the epoch. The value is everything after the first
// '=', so values may contain '='; qualifiers may not.
func parseCellSet(s string) (cellSet, error) {
	col, value, ok := strings.Cut(s, "=")
	if !ok {
		return cellSet{}, fmt.Errorf("cell %q: want family:column[@timestamp]=value", s)
	}
	c := cellSet{Timestamp: bigtable.ServerTime, Value: value}
	if i := strings.LastIndexByte(col, '@'); i >= 0 {
		ts, err := strconv.ParseInt(col[i+1:], 10, 64)
		if err != nil || ts < 0 {
			return cellSet{}, fmt.Errorf("cell %q: timestamp %q is not microseconds since the epoch", s, col[i+1:])
		}
		c.Timestamp = bigtable.Timestamp(ts)
		col = col[:i]
	}
	fam, qual, ok := strings.Cut(col, ":")
	if !ok {
		return cellSet{}, fmt.Errorf("cell %q: want family:column[@timestamp]=value", s)
	}
	if err := validFamily(fam); err != nil {
		return cellSet{}, fmt.Errorf("cell %q: %w", s, err)
	}
	c.Family, c.Qualifier = fam, qual
	return c, nil
}

// parseGCPolicy parses cbt's GC policy expressions:
//
//	never | maxversions=N | maxage=DUR | EXPR and EXPR | EXPR or EXPR | (EXPR)
//
// "and" binds tighter than "or", as in most languages; DUR is a Go
// duration with an extra "d" unit for days (cbt's "1d", "12h", "1d12h").
func parseGCPolicy(s string) (bigtable.GCPolicy, error) {
	p := &gcParser{toks: gcTokens(s)}
	if len(p.toks) == 0 {
		return nil, fmt.Errorf("empty GC policy: want never, maxversions=N, maxage=DUR, or an and/or expression of them")
	}
	pol, err := p.or()
	if err != nil {
		return nil, err
	}
	if p.i != len(p.toks) {
		return nil, fmt.Errorf("GC policy %q: unexpected %q", s, p.toks[p.i])
	}
	return pol, nil
}

// gcTokens splits a policy into words and parentheses.
func gcTokens(s string) []string {
	var toks []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			toks = append(toks, cur.String())
			cur.Reset()
		}
	}
	for _, r := range s {
		switch {
		case r == '(' || r == ')':
			flush()
			toks = append(toks, string(r))
		case unicode.IsSpace(r):
			flush()
		default:
			cur.WriteRune(r)
		}
	}
	flush()
	return toks
}

type gcParser struct {
	toks []string
	i    int
}

func (p *gcParser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func (p *gcParser) or() (bigtable.GCPolicy, error) {
	first, err := p.and()
	if err != nil {
		return nil, err
	}
	subs := []bigtable.GCPolicy{first}
	for strings.EqualFold(p.peek(), "or") || p.peek() == "||" {
		p.i++
		next, err := p.and()
		if err != nil {
			return nil, err
		}
		subs = append(subs, next)
	}
	if len(subs) == 1 {
		return first, nil
	}
	return bigtable.UnionPolicy(subs...), nil
}

func (p *gcParser) and() (bigtable.GCPolicy, error) {
	first, err := p.atom()
	if err != nil {
		return nil, err
	}
	subs := []bigtable.GCPolicy{first}
	for strings.EqualFold(p.peek(), "and") || p.peek() == "&&" {
		p.i++
		next, err := p.atom()
		if err != nil {
			return nil, err
		}
		subs = append(subs, next)
	}
	if len(subs) == 1 {
		return first, nil
	}
	return bigtable.IntersectionPolicy(subs...), nil
}

func (p *gcParser) atom() (bigtable.GCPolicy, error) {
	tok := p.peek()
	if tok == "" {
		return nil, fmt.Errorf("GC policy ends early: want maxversions=N, maxage=DUR or (...)")
	}
	p.i++
	if tok == "(" {
		pol, err := p.or()
		if err != nil {
			return nil, err
		}
		if p.peek() != ")" {
			return nil, fmt.Errorf("GC policy: missing ')'")
		}
		p.i++
		return pol, nil
	}
	if strings.EqualFold(tok, "never") {
		return bigtable.NoGcPolicy(), nil
	}
	k, v, ok := strings.Cut(tok, "=")
	switch {
	case ok && strings.EqualFold(k, "maxversions"):
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("maxversions=%q: want a positive integer", v)
		}
		return bigtable.MaxVersionsPolicy(n), nil
	case ok && strings.EqualFold(k, "maxage"):
		d, err := parseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("maxage=%q: %w", v, err)
		}
		return bigtable.MaxAgePolicy(d), nil
	}
	return nil, fmt.Errorf("GC policy: unexpected %q: want never, maxversions=N, maxage=DUR, and, or, (, )", tok)
}

// parseDuration is time.ParseDuration with a "d" (24h) unit, which GC
// policies need most ("maxage=30d"), for positive ages only: every part
// is an unsigned number and a unit, so "1d-23h" (which would be 1h) is
// refused rather than read as a difference.
func parseDuration(s string) (time.Duration, error) {
	bad := func(why string) error {
		return fmt.Errorf("bad duration %q: %s; want e.g. 30d, 12h, 1d12h, 90m", s, why)
	}
	var total time.Duration
	rest := s
	if i := strings.IndexByte(rest, 'd'); i >= 0 {
		if i == 0 || strings.Trim(rest[:i], "0123456789") != "" {
			return 0, bad(fmt.Sprintf("%q before d is not a number of days", rest[:i]))
		}
		days, err := strconv.Atoi(rest[:i])
		if err != nil || days > int(math.MaxInt64/int64(24*time.Hour)) {
			return 0, bad("too many days")
		}
		total = time.Duration(days) * 24 * time.Hour
		rest = rest[i+1:]
	}
	if rest != "" {
		if c := rest[0]; (c < '0' || c > '9') && c != '.' {
			return 0, bad(fmt.Sprintf("%q is not a number and a unit (ns, us, ms, s, m, h; d first)", rest))
		}
		d, err := time.ParseDuration(rest)
		if err != nil {
			return 0, bad(fmt.Sprintf("%q is not a number and a unit (ns, us, ms, s, m, h; d first)", rest))
		}
		if total > math.MaxInt64-d {
			return 0, bad("too long")
		}
		total += d
	}
	if total <= 0 {
		return 0, bad("not a positive age")
	}
	return total, nil
}
